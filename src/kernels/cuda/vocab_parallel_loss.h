// The CUDA implementation of the training half of kernels/vocab_parallel_loss.h over device pointers
// (kernels/cuda/cross_entropy.cu): the shards' sums rescaled to the group's max, and the masked loss
// sum with each row's log-sum-exp. (shard_argmax and pick_scores, for evaluation, are CPU-only yet.)
// Declared in every build, defined only in a CUDA one.
#pragma once

#include <cstdint>

namespace tessera::kernels::cuda {

void rescale_sum_exp(float* sumexp, const float* max, const float* global_max, int64_t rows);
// Writes lse [rows]; returns the sum in double, in a fixed order (it waits for the GPU). `device` is the
// CUDA ordinal the tensors live on (its allocator holds the total).
double masked_loss_sum(const float* max, const float* sumexp, const float* target, const float* loss_mask,
                       float* lse, int64_t rows, int device);

}  // namespace tessera::kernels::cuda
