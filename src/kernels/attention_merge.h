// Attention of one block of queries over several disjoint blocks of keys, merged from each block's
// partial result: a partial output is normalised over its own keys only, and its log-sum-exp says how
// much softmax mass those keys hold, so the whole is sum_k exp(lse_k - lse) out_k with
// lse = log sum_k exp(lse_k). Ring attention (model/ring_attention.h) merges its blocks this way, as
// Megatron's context parallelism does. Dispatched on the tensors' device (the CPU code is
// kernels/cpu/attention_merge.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera::kernels {

// out [seq, batch, heads, d] and lse [batch, heads, seq] (attention_forward's layout) hold the merge of
// the blocks so far; part_out and part_lse, of the same shapes, another block's. Afterwards out and
// lse hold the merge of all of them. Dropout on the probabilities merges alike (it scales entries of a
// block's normalised probabilities, which the weights rescale linearly).
void attention_merge_into(const Tensor& out, const Tensor& lse, const Tensor& part_out, const Tensor& part_lse,
                          int64_t seq, int64_t batch, int64_t heads, int64_t head_dim);

}  // namespace tessera::kernels
