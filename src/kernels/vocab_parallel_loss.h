// The per-row arithmetic of Megatron's vocab-parallel cross-entropy around the reductions over the
// tensor group, on tensors: no rank holds all logits, so each computes its shard's statistics
// (kernels/cross_entropy.h), the group reduces them, and these combine the results. Dispatched on the
// tensors' device (kernels/device_dispatch.h; the CPU code is kernels/cpu/vocab_parallel_loss.h, the
// CUDA code kernels/cuda/vocab_parallel_loss.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tessera::kernels {

// After the group's max has been taken: sumexp[r] *= exp(max[r] - global_max[r]) (each [rows]), so the
// shards' sums are relative to the same maximum and can be summed.
void rescale_sum_exp(const Tensor& sumexp, const Tensor& max, const Tensor& global_max);

// lse[r] = max[r] + log(sumexp[r]); returns sum_r (lse[r] - target[r]) * loss_mask[r] in double.
double masked_loss_sum(const Tensor& max, const Tensor& sumexp, const Tensor& target, const Tensor& loss_mask,
                       const Tensor& lse);

// The same sum kept on the tensors' device and added into `total` (a loss total, below) rather than
// returned: on a GPU nothing is copied back, so the host can queue the micro-batch's backward and the next
// forwards while the GPU works; the total holds the same bits as adding masked_loss_sum's results in double
// in the same order.
void masked_loss_sum_into(const Tensor& max, const Tensor& sumexp, const Tensor& target, const Tensor& loss_mask,
                          const Tensor& lse, const Tensor& total);
// A loss total on `device`: one double, stored in an int64 [1] tensor (tensors have no fp64 type), 0.
Tensor loss_total(Device device);
// The total on the host: a copy that waits for the device's work before it (the one synchronisation).
double loss_total_value(const Tensor& total);
// n loss totals side by side in one int64 [n] tensor, each 0: totals.narrow(i, 1) is a loss total, so that
// a step's several sums (model/language_model.h LossSums) come back in one copy.
Tensor loss_totals(int64_t n, Device device);
// The first n totals on the host, in one copy (which waits for the device's work before it).
std::vector<double> loss_totals_values(const Tensor& totals, int64_t n);

// Scoring (evaluation): for each row of a shard of logits [rows, vocab_local] holding ids
// [vocab_begin, vocab_begin + vocab_local), best[2r] and best[2r + 1] (best: 2 * rows elements) = the
// shard's largest logit and its global id (the first of equal maxima, as torch.argmax).
void shard_argmax(const Tensor& logits, const Tensor& best, int64_t vocab_begin);

// Per row, from the shards' best [shards, 2 * rows] (in vocabulary order), the reduced label logit
// target [rows] and the log-sum-exp lse [rows]: out[3r..3r+2] = (target[r], lse[r], id of the largest
// logit over all shards, the first shard winning ties).
void pick_scores(const Tensor& best, const Tensor& target, const Tensor& lse, const Tensor& out);

}  // namespace tessera::kernels
