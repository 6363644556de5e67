// Ring attention, Megatron-Core's context parallelism with cp_comm_type p2p (Liu et al. 2023, "Ring
// Attention"; Megatron's load-balanced causal variant). Each of the cp ranks holds two query chunks and
// the same two key/value chunks of every sequence (parallel/context_parallel.h: rank i holds global
// chunks i and 2 cp - 1 - i, each `chunk` positions). The key/value chunks travel around the ring in cp
// steps; at each step a rank attends with its query chunks to the key/value chunks it holds, but only
// to the block pairs the causal mask leaves: a query chunk against the key chunk of the same number is
// causal (the diagonal), against an earlier one is full, and against a later one is skipped. That is
// two chunk-sized blocks per step on every rank but the first step's three, the load balance.
//
// Each block's attention is the tiled kernel on a query chunk and a key chunk (kernels/attention.h:
// causal for the diagonal, bidirectional without padding for a full block), its dropout keyed by the
// chunks' global positions (AttentionDropout::query_offset, key_offset); the partial outputs are merged
// by their log-sum-exp (kernels/attention_merge.h). Backward runs the ring again: a block's backward
// takes the merged output and log-sum-exp (the softmax of the whole row), gives the query chunk's part
// of dQ, and the key/value chunks' parts of dK and dV, which travel around the ring with them and
// arrive, summed over every rank's queries, at the rank that holds those keys. The exchange of the next
// block is posted before the current one is computed (overlap).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/attention.h"
#include "parallel/context_parallel.h"

namespace tessera::model {

// A rank's part of the sequence: 2 chunks of `chunk` positions each, [2 chunk, batch, heads, head_dim]
// queries and [2 chunk, batch, kv_heads, head_dim] keys and values, of a sequence of 2 cp chunks.
struct RingAttentionShape {
  int64_t chunk = 0, batch = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int cp = 1;
  int64_t sequence() const { return 2 * cp * chunk; }
};

// out [2 chunk, batch, heads * head_dim]; lse [2, batch, heads, chunk] (per query chunk). `dropout` is
// the layer's (seed, stream, sample and head offsets, total heads); its seq and offsets are set here.
// doc_start: int32 [batch, 2 chunk], the global position where the document of each of this rank's
// query positions starts (--reset-attention-mask; undefined: plain causal). A query only sees keys
// from there on: the diagonal block gets the kernel's document-causal mask, a full block each query's
// first key of the earlier chunk (AttentionShape::bidirectional_doc_start), so a query whose document
// starts after that chunk gets nothing from it. It stays on its rank: it is the queries' own.
void ring_attention_forward(const parallel::ContextParallelContext& cp, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& out, const Tensor& lse, const RingAttentionShape& shape,
                            float softmax_scale, const kernels::AttentionDropout& dropout,
                            const Tensor& doc_start = Tensor());
// dq, dk, dv (shaped as q, k, v) are overwritten with this rank's positions' gradients.
void ring_attention_backward(const parallel::ContextParallelContext& cp, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dout,
                             const Tensor& dq, const Tensor& dk, const Tensor& dv, const RingAttentionShape& shape,
                             float softmax_scale, const kernels::AttentionDropout& dropout,
                             const Tensor& doc_start = Tensor());

// One step of the ring on rank `rank`, without communication (what the functions above run at each
// step, exposed for the test that checks the merge against whole-sequence attention): this rank's
// query chunks against the key/value chunks of rank `source`.
// Forward: the blocks' outputs merged into out and lse; a query chunk's first block (step 0, where
// source == rank, gives every query chunk one) is written rather than merged.
void ring_step_forward(const RingAttentionShape& shape, int rank, int source, const Tensor& q, const Tensor& k,
                       const Tensor& v, const Tensor& out, const Tensor& lse, float softmax_scale,
                       const kernels::AttentionDropout& dropout, const Tensor& doc_start = Tensor());
// Backward: adds the blocks' gradients into dq (this rank's queries) and dk, dv (rank source's keys and
// values); out and lse are the merged forward's.
void ring_step_backward(const RingAttentionShape& shape, int rank, int source, const Tensor& q, const Tensor& k,
                        const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dout, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv, float softmax_scale,
                        const kernels::AttentionDropout& dropout, const Tensor& doc_start = Tensor());

}  // namespace tessera::model
