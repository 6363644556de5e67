// Softmax cross-entropy over a vocabulary shard on tensors, fused: the per-shard statistics that the
// tensor group reduces (kernels/vocab_parallel_loss.h combines them), and a backward that turns the
// logits into dlogits in place, so probabilities are never stored. Dispatched on the tensors' device
// (kernels/device_dispatch.h; the CPU code is kernels/cpu/cross_entropy.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera::kernels {

// logits [rows, vocab_local] holding vocabulary ids [vocab_begin, vocab_begin + vocab_local), targets
// [rows] int32. For each row: max_out = max logit, sumexp_out = sum exp(logit - max_out),
// target_logit_out = logit of targets[row] if it is in this shard, else 0 (each [rows]).
void cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, const Tensor& max_out,
                               const Tensor& sumexp_out, const Tensor& target_logit_out, int64_t vocab_begin);

// In place: logits[r, j] <- (exp(logits[r, j] - lse[r]) - [vocab_begin + j == targets[r]]) * dloss[r],
// rounded to round_output (mixed precision: dlogits feed only GEMMs).
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& dloss,
                            int64_t vocab_begin, DType round_output = DType::F32);

// Training with the whole vocabulary on this rank (no tensor-parallel reduction between the statistics
// and the gradient), fused as llm.c's classifier: one visit of each row of logits [rows, vocab] (fp32, or
// bf16 on the GPU's fast path: read as fp32, accumulated in double) gives the statistics of
// cross_entropy_shard_stats, lse [rows] = max + log(sumexp), and the logits turned into dlogits in place
// (cross_entropy_backward with dloss [rows]; bf16 logits hold a bf16 gradient, fp32 ones are rounded to
// round_output). The unfused calls' arithmetic element for element: their bits on the CPU.
void cross_entropy_fused(const Tensor& logits, const Tensor& targets, const Tensor& dloss, const Tensor& max_out,
                         const Tensor& sumexp_out, const Tensor& target_logit_out, const Tensor& lse_out,
                         DType round_output = DType::F32);

}  // namespace tessera::kernels
