// The CPU implementation of kernels/cross_entropy.h, over host buffers: what the tensor-level entry points call
// once the tensors' device is checked, and what the kernel tests exercise directly.
// Softmax cross-entropy over the vocabulary, fused: forward returns the loss per row and the
// log-sum-exp, backward turns the logits buffer into dlogits in place; probabilities are never stored.
// The per-shard statistics let a vocab-parallel layer (later) reduce max / sum-exp / target logit
// across the tensor-parallel group.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels::cpu {

// logits [rows, vocab_local] holding vocabulary ids [vocab_begin, vocab_begin + vocab_local).
// For each row: max_out = max logit, sumexp_out = sum exp(logit - max_out), target_logit_out = logit of
// targets[row] if it is in this shard, else 0.
void cross_entropy_shard_stats(const float* logits, const int32_t* targets, float* max_out, float* sumexp_out,
                               float* target_logit_out, int64_t rows, int64_t vocab_local, int64_t vocab_begin);

// Single-shard fused forward: loss[row] = lse - logit[target], lse[row] saved for backward.
void cross_entropy_forward(const float* logits, const int32_t* targets, float* loss, float* lse, int64_t rows,
                           int64_t vocab);

// In place: logits[r, j] <- (exp(logits[r, j] - lse[r]) - [vocab_begin + j == targets[r]]) * dloss[r],
// rounded to round_output (mixed precision: dlogits feed only GEMMs).
void cross_entropy_backward(float* logits, const int32_t* targets, const float* lse, const float* dloss,
                            int64_t rows, int64_t vocab_local, int64_t vocab_begin,
                            DType round_output = DType::F32);

// Training over a single shard, fused (llm.c's fused classifier): per row the statistics of
// cross_entropy_shard_stats (max_out, sumexp_out, target_logit_out), lse_out = max + log(sumexp), and the
// logits turned into dlogits in place with dloss, in one visit of the row while it is in cache. The
// arithmetic of the unfused calls element for element, so the results are theirs bit for bit. T is float
// or uint16_t (bf16 storage: read as fp32, the gradient stored rounded to bf16; round_output is then moot).
template <typename T>
void cross_entropy_fused(T* logits, const int32_t* targets, const float* dloss, float* max_out, float* sumexp_out,
                         float* target_logit_out, float* lse_out, int64_t rows, int64_t vocab,
                         DType round_output = DType::F32);

}  // namespace tessera::kernels::cpu
