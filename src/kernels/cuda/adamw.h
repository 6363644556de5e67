// The CUDA implementation of kernels/adamw.h over device pointers (kernels/cuda/adamw.cu): the AdamW
// step over the flat buffers with the clipping factor (the per-element update and the step's scalars of
// kernels/math/adamw.h, shared with the CPU), and the sum of squares for the gradient norm, whose
// non-finite value is also the loss scaler's overflow check. Declared in every build, defined only in a
// CUDA one.
#pragma once

#include <cstdint>

#include "kernels/adamw.h"

namespace tessera::kernels::cuda {

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWHyper& h);
// The sum of x[i]^2 in double, deterministic (fixed chunks of elements, summed in a fixed order); it
// waits for the GPU. `device` is the CUDA ordinal x lives on (its allocator holds the partial sums).
double sum_of_squares(const float* x, int64_t n, int device);

// One launch each, nothing copied back (kernels/adamw.h). grad_norm_and_clip: a block per chunk of the
// blocked order (kernels/math/blocked_sum.h), the last block to finish summing the partials in order and
// writing the StepScalars at `scalars` (device memory). adamw_multi_step: one thread per element of the
// segments, its segment found by a binary search of the table's packed starts (device memory, `segments`
// rows); the clip factor read from `scalars`.
void grad_norm_and_clip(const float* x, int64_t n, float clip_grad, float loss_scale, StepScalars* scalars, int device);
void adamw_multi_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const int64_t* table,
                      int64_t segments, int64_t total, const AdamWHyper& h, const StepScalars* scalars);

}  // namespace tessera::kernels::cuda
