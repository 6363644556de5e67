// AdamW (Loshchilov & Hutter) with decoupled weight decay, as Megatron's fused Adam in adam_w_mode:
//   p <- p - lr * wd * p;  m <- b1 m + (1-b1) g;  v <- b2 v + (1-b2) g^2;
//   p <- p - lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
// and the sum of squares for the global gradient norm, on fp32 tensors (any shape, read flat),
// dispatched on their device (kernels/device_dispatch.h; the CPU code is kernels/cpu/adamw.h, the
// per-element update kernels/math/adamw.h): what the optimizers call, so that they never index tensor
// memory themselves.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera::kernels {

struct AdamWHyper {
  float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
  int64_t step = 1;  // 1-based step count used for bias correction
  // The step uses grad * grad_scale (the gradient-clipping factor), read on the fly rather than
  // written back: one pass over the gradients less. grad itself is left as it is.
  float grad_scale = 1.0f;
};

// param, grad, exp_avg and exp_avg_sq have the same number of elements.
void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamWHyper& h);
// Sum of squares of x in double (deterministic whatever the thread count).
double sum_of_squares(const Tensor& x);

}  // namespace tessera::kernels
