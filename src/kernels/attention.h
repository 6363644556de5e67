// Causal self-attention as a tiled online-softmax ("flash") kernel: forward never materialises the
// seq x seq score matrix (it keeps a running max and sum per query row, tile by tile, and saves only
// the log-sum-exp per row); backward recomputes the probabilities tile by tile from that statistic.
// Grouped-query attention: query head h reads key/value head h / (heads / kv_heads).
// Optionally document-causal (Megatron's --reset-attention-mask): see AttentionShape::doc_start.
#pragma once

#include <cstdint>

namespace tessera::kernels {

struct AttentionShape {
  int64_t seq = 0, batch = 0;      // activations are [seq, batch, heads, head_dim] (Megatron's [s, b, h])
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  // Document-causal mask, as Megatron's --reset-attention-mask builds it: a token attends only to the
  // earlier tokens of its own document. Sample-major, unlike q/k/v. Entries must satisfy
  // 0 <= doc_start[b * seq + i] <= i and be non-decreasing in i within a sample (checked); nullptr is
  // plain causal attention, and all zeros gives bitwise the same result as nullptr.
  const int32_t* doc_start = nullptr;  // optional [batch, seq]: query i of sample b attends to keys [doc_start[b*seq+i], i]
};

// Attention-probability dropout, keyed by global coordinates so it is layout-independent:
// probability (sample_offset + b, head_offset + h, i, j) uses Philox element
// ((sample_offset + b) * total_heads + head_offset + h) * seq * seq + i * seq + j of stream `stream`.
struct AttentionDropout {
  float p = 0.0f;
  uint64_t seed = 0, stream = 0;
  int64_t sample_offset = 0, head_offset = 0, total_heads = 0;
};

// q [seq, batch, heads, d], k and v [seq, batch, kv_heads, d] -> out [seq, batch, heads, d],
// lse [batch, heads, seq] (log-sum-exp of the scaled scores of each query row, saved for backward).
void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       const AttentionShape& shape, float softmax_scale, const AttentionDropout& dropout);
// dq, dk, dv are overwritten. Deterministic whatever the thread count.
void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv, const AttentionShape& shape,
                        float softmax_scale, const AttentionDropout& dropout);

}  // namespace tessera::kernels
