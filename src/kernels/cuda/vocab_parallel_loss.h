// The CUDA implementation of kernels/vocab_parallel_loss.h over device pointers: the training half
// (kernels/cuda/cross_entropy.cu: the shards' sums rescaled to the group's max, and the masked loss sum
// with each row's log-sum-exp) and the scoring half (kernels/cuda/vocab_parallel_scores.cu: each
// shard's argmax, and the pick over the shards). Declared in every build, defined only in a CUDA one.
#pragma once

#include <cstdint>

namespace tessera::kernels::cuda {

void rescale_sum_exp(float* sumexp, const float* max, const float* global_max, int64_t rows);
// Writes lse [rows]; returns the sum in double, in a fixed order (it waits for the GPU). `device` is the
// CUDA ordinal the tensors live on (its allocator holds the total).
double masked_loss_sum(const float* max, const float* sumexp, const float* target, const float* loss_mask,
                       float* lse, int64_t rows, int device);

// As masked_loss_sum, the sum added to *total (a double on the device) by the kernel: nothing waits.
void masked_loss_sum_into(const float* max, const float* sumexp, const float* target, const float* loss_mask,
                          float* lse, int64_t rows, double* total);

// The CPU's choices exactly (kernels/cpu/vocab_parallel_loss.h): the first of equal maxima, a NaN
// skipped unless it is a row's first logit (then it is the row's answer, as a scan from it keeps it).
void shard_argmax(const float* logits, float* best, int64_t rows, int64_t vocab_local, int64_t vocab_begin);
void pick_scores(const float* best, int64_t shards, const float* target, const float* lse, float* out, int64_t rows);

}  // namespace tessera::kernels::cuda
