// The CUDA implementation of kernels/distillation_loss.h over device pointers
// (kernels/cuda/distillation_loss.cu): the shard statistics one block per row (the maxima exact, the
// sums in double across the block), the KL sum by one block in a fixed order, the backward one element
// per thread; a row's KL and each logit's gradient are kernels/math/distillation.h's, as on the CPU.
// Declared in every build, defined only in a CUDA one.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels::cuda {

void distillation_shard_stats(const float* student, const float* teacher, float temperature, float* stats,
                              int64_t rows, int64_t vocab_local);
// Writes kd_lse [2, rows]; returns sum_r loss_mask[r] KL_r in double (it waits for the GPU: one copy
// back, as masked_loss_sum's). `device` is the CUDA ordinal of the tensors (its allocator holds the sum).
double distillation_kl_sum(const float* stats, const float* loss_mask, float* kd_lse, int64_t rows, int device);
void distillation_backward(float* logits, const float* teacher, const int32_t* targets, const float* lse,
                           const float* dce, const float* kd_lse, const float* dkd, float temperature, int64_t rows,
                           int64_t vocab_local, int64_t vocab_begin, DType round_output);

}  // namespace tessera::kernels::cuda
