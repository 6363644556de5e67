// Causal or bidirectional self-attention on tensors, as a tiled online-softmax ("flash") kernel: only the log-sum-exp
// per query row is saved, and backward recomputes the probabilities tile by tile (kernels/cpu/attention.h
// has the algorithm). Grouped-query attention: query head h reads key/value head h / (heads / kv_heads).
// Optionally document-causal (Megatron's --reset-attention-mask), or bidirectional with a padding mask
// (BERT). Dispatched on the tensors' device (kernels/device_dispatch.h): kernels/cpu/attention.h or, on a
// GPU, kernels/cuda/attention.h.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera::kernels {

struct AttentionShape {
  int64_t seq = 0, batch = 0;      // activations are [seq, batch, heads, head_dim] (Megatron's [s, b, h])
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  // Causal only: the keys and values, when more than the queries (0: seq). The queries are then the last
  // seq of the kv_seq positions (query r at position kv_seq - seq + r, attending to keys [0, that]): a
  // slice of a sequence against its cached prefix (TeraPipe), or a context-parallel chunk against the
  // keys before it. lse stays [batch, heads, seq]; k, v, dk, dv are [kv_seq, batch, kv_heads, d].
  int64_t kv_seq = 0;
  // Document-causal mask, as Megatron's --reset-attention-mask builds it: a token attends only to the
  // earlier tokens of its own document. Sample-major, unlike q/k/v. Entries must satisfy
  // 0 <= doc_start[b * seq + i] <= i and be non-decreasing in i within a sample (checked); nullptr is
  // plain causal attention, and all zeros gives bitwise the same result as nullptr.
  // How the CPU implementation receives the mask; callers of the tensor entry points below pass it as a
  // tensor instead and leave this null.
  const int32_t* doc_start = nullptr;  // optional [batch, seq]: query i of sample b attends to keys [doc_start[b*seq+i], i]
  // Bidirectional attention (BERT's encoder) when false: every query sees every key that is not padding.
  bool causal = true;
  // Bidirectional only: the mask is a document start per query instead of a padding mask, query i of
  // sample b seeing keys [doc_start[b * seq + i], seq). Entries lie in [0, seq] and are non-decreasing
  // (checked); a row whose entry is seq sees no key, and gets a zero output and a log-sum-exp of -inf
  // (which attention_merge_into ignores). Context parallelism's block of queries against an earlier
  // chunk of keys under a document mask (model/ring_attention.h).
  bool bidirectional_doc_start = false;
  // Bidirectional only, how the CPU implementation receives the padding mask (the entry points take it as
  // a tensor): [batch, seq], key j of sample b is seen iff key_valid[b * seq + j] != 0; each sample needs
  // at least one (checked). nullptr: no padding. Padded query rows still attend to the valid keys (as
  // Hugging Face's BERT), so their outputs stay finite; they carry no loss.
  const int32_t* key_valid = nullptr;
};

// Attention-probability dropout, keyed by global coordinates so it is layout-independent:
// probability (sample_offset + b, head_offset + h, i, j) uses Philox element
// ((sample_offset + b) * total_heads + head_offset + h) * S * S + i * S + j of stream `stream`, with i and j
// the query's and key's positions among the keys (see AttentionShape::kv_seq) and S = `seq`, the whole
// sequence's length (0: the keys', kv_seq), so that a slice of a sequence draws the whole sequence's mask.
struct AttentionDropout {
  float p = 0.0f;
  uint64_t seed = 0, stream = 0;
  int64_t sample_offset = 0, head_offset = 0, total_heads = 0;
  int64_t seq = 0;
  // Where this call's queries and keys sit in the sequence of length `seq` that the masks are keyed by:
  // i and j above are query_offset + the query's position among the keys and key_offset + the key's.
  // A context-parallel block pair (model/ring_attention.h) is a chunk of queries against a chunk of keys
  // elsewhere in the sequence; 0 and 0 otherwise.
  int64_t query_offset = 0, key_offset = 0;
};

// q [seq, batch, heads, d], k and v [seq, batch, kv_heads, d] (any shapes of those sizes) -> out
// [seq, batch, heads, d], lse [batch, heads, seq] (log-sum-exp of the scaled scores of each query row,
// saved for backward). mask: int32 [batch, seq] or undefined: with shape.causal the document mask
// (AttentionShape::doc_start; undefined: plain causal), otherwise the padding mask (AttentionShape::key_valid;
// undefined: no padding), or with shape.bidirectional_doc_start each query's first key.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                       const Tensor& mask, const AttentionShape& shape, float softmax_scale,
                       const AttentionDropout& dropout);
// dq, dk, dv are overwritten. Deterministic whatever the thread count.
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor& mask, const AttentionShape& shape, float softmax_scale,
                        const AttentionDropout& dropout);

// A block's first keys for the mask above (causal doc_start or bidirectional_doc_start), from document
// starts at global positions: out [batch, width] (int32) gets clamp(doc_start[b, column + r] - first_key,
// 0, width), doc_start being [batch, n] (int32). Context parallelism's query chunk (columns [column,
// column + width) of its rank's) against the key chunk that starts at global position first_key.
void block_doc_start(const Tensor& doc_start, int64_t column, int64_t first_key, const Tensor& out);

}  // namespace tessera::kernels
