// The CPU implementation of kernels/attention.h, over host buffers: what the tensor-level entry points call
// once the tensors' device is checked, and what the kernel tests exercise directly.
// Causal self-attention as a tiled online-softmax ("flash") kernel: forward never materialises the
// seq x seq score matrix (it keeps a running max and sum per query row, tile by tile, and saves only
// the log-sum-exp per row); backward recomputes the probabilities tile by tile from that statistic.
// Grouped-query attention: query head h reads key/value head h / (heads / kv_heads).
// Optionally document-causal (Megatron's --reset-attention-mask): see AttentionShape::doc_start.
#pragma once

#include <cstdint>

#include "kernels/attention.h"  // AttentionShape, AttentionDropout

namespace tessera::kernels::cpu {

// q [seq, batch, heads, d], k and v [seq, batch, kv_heads, d] -> out [seq, batch, heads, d],
// lse [batch, heads, seq] (log-sum-exp of the scaled scores of each query row, saved for backward).
void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       const AttentionShape& shape, float softmax_scale, const AttentionDropout& dropout);
// dq, dk, dv are overwritten. Deterministic whatever the thread count.
void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv, const AttentionShape& shape,
                        float softmax_scale, const AttentionDropout& dropout);

// kernels::block_doc_start on host buffers: doc [batch, n], out [batch, width].
void block_doc_start(const int32_t* doc, int64_t batch, int64_t n, int64_t column, int64_t width, int64_t first_key,
                     int32_t* out);

}  // namespace tessera::kernels::cpu
