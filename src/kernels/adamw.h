// AdamW (Loshchilov & Hutter) with decoupled weight decay, as Megatron's fused Adam in adam_w_mode:
//   p <- p - lr * wd * p;  m <- b1 m + (1-b1) g;  v <- b2 v + (1-b2) g^2;
//   p <- p - lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
// and the sum of squares for the global gradient norm, on fp32 tensors (any shape, read flat),
// dispatched on their device (kernels/device_dispatch.h; the CPU code is kernels/cpu/adamw.h, the
// per-element update kernels/math/adamw.h): what the optimizers call, so that they never index tensor
// memory themselves.
#pragma once

#include <cstdint>
#include <vector>

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

// What the one-launch gradient norm leaves on the device for the step, read on the host only when the
// caller wants it (read_step_scalars), so that the step itself copies nothing back.
struct StepScalars {
  double sum_of_squares = 0;  // of the gradients as they are in the buffer
  double grad_norm = 0;       // sqrt(sum_of_squares) / loss_scale
  float clip_scale = 0;       // what AdamW multiplies each gradient by; NaN: grad_norm is not finite, no step
};
// An int64 tensor of this many elements holds a StepScalars' bytes (tensors have no fp64 type).
inline constexpr int64_t kStepScalarWords = 3;

// The gradient norm of the flat x and the factor the AdamW step applies, one launch on a GPU: the sum
// of squares in the blocked order the CPU shares (kernels/math/blocked_sum.h), then grad_norm and
// clip_scale = clip_coefficient(clip_grad, grad_norm) / loss_scale (kernels/math/adamw.h), into
// scalars (int64 [kStepScalarWords] on x's device).
void grad_norm_and_clip(const Tensor& x, const Tensor& scalars, float clip_grad, float loss_scale);
// The scalars on the host: a copy that waits for the device's work before it.
StepScalars read_step_scalars(const Tensor& scalars);

// A range of parameters for the multi-tensor step: elements [begin, begin + length) of the parameter and
// gradient buffers, [state, state + length) of the moments, decayed or not.
struct AdamWSegment {
  int64_t begin, length, state;
  bool decay;
};
// The segments as the table adamw_multi_step reads: rows int64 [segments, 5] on `device`, each (packed
// start, begin, length, state, decay), the packed start being the sum of the lengths before it; checked
// against the sizes of the buffers it is for when made, so that the step reads nothing back.
struct AdamWSegmentTable {
  Tensor rows;
  int64_t total = 0;               // elements over all segments
  int64_t params = 0, state = 0;  // the parameter and moment buffers' sizes it was checked against
};
AdamWSegmentTable adamw_segment_table(const std::vector<AdamWSegment>& segments, int64_t params, int64_t state,
                                      Device device);
// One AdamW step over every segment of the table (multi-tensor: one launch on a GPU), weight decay
// h.weight_decay where a segment decays and 0 elsewhere, each gradient times scalars' clip_scale as it is
// read (h.grad_scale is not used); no element changes where clip_scale is not finite. Each element's
// update is adamw_step's, bit for bit.
void adamw_multi_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                      const AdamWSegmentTable& table, const AdamWHyper& h, const Tensor& scalars);

}  // namespace tessera::kernels
