// The CPU implementation of kernels/vocab_parallel_loss.h, over host buffers: what the tensor-level entry points call
// once the tensors' device is checked, and what the kernel tests exercise directly.
// The per-row arithmetic of Megatron's vocab-parallel cross-entropy around the reductions over the
// tensor group: no rank holds all logits, so each computes its shard's statistics
// (kernels/cross_entropy.h), the group reduces them, and these functions combine the results.
#pragma once

#include <cstdint>

namespace tessera::kernels::cpu {

// After the group's max has been taken: sumexp[r] *= exp(max[r] - global_max[r]), so the shards' sums
// are relative to the same maximum and can be summed.
void rescale_sum_exp(float* sumexp, const float* max, const float* global_max, int64_t rows);

// lse[r] = max[r] + log(sumexp[r]); returns sum_r (lse[r] - target[r]) * loss_mask[r] in double.
double masked_loss_sum(const float* max, const float* sumexp, const float* target, const float* loss_mask,
                       float* lse, int64_t rows);

// Scoring (evaluation): for each row of a shard of logits [rows, vocab_local] holding ids
// [vocab_begin, vocab_begin + vocab_local), best[2r] and best[2r + 1] = the shard's largest logit and its
// global id (the first of equal maxima, as torch.argmax; ids are exact in fp32 below 2^24).
void shard_argmax(const float* logits, float* best, int64_t rows, int64_t vocab_local, int64_t vocab_begin);

// Per row, from the shards' best [shards, 2 * rows] (in vocabulary order), the reduced label logit and
// the log-sum-exp: out[3r..3r+2] = (target[r], lse[r], id of the largest logit over all shards, the first
// shard winning ties).
void pick_scores(const float* best, int64_t shards, const float* target, const float* lse, float* out,
                 int64_t rows);

}  // namespace tessera::kernels::cpu
