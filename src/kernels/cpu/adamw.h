// The CPU implementation of kernels/adamw.h, over host buffers: what the tensor-level entry points call
// once the tensors' device is checked, and what the kernel tests exercise directly.
// AdamW (Loshchilov & Hutter) with decoupled weight decay, as Megatron's fused Adam in adam_w_mode:
//   p <- p - lr * wd * p;  m <- b1 m + (1-b1) g;  v <- b2 v + (1-b2) g^2;
//   p <- p - lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
#pragma once

#include <cstdint>

#include "kernels/adamw.h"  // AdamWHyper

namespace tessera::kernels::cpu {

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWHyper& h);

// Sum of squares of x in double (deterministic whatever the thread count), for the global grad norm.
double sum_of_squares(const float* x, int64_t n);

// The CPU counterparts of the GPU's one-launch kernels (kernels/adamw.h), in their order of arithmetic:
// the sum of squares of x in the blocked order (kernels/math/blocked_sum.h) and the step's scalars from it;
// the multi-tensor step over a segment table (int64 [segments, 5], kernels::adamw_segment_table).
StepScalars grad_norm_and_clip(const float* x, int64_t n, float clip_grad, float loss_scale);
void adamw_multi_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const int64_t* table,
                      int64_t segments, const AdamWHyper& h, float clip_scale);

}  // namespace tessera::kernels::cpu
