// Attention for incremental decoding on tensors: the new query rows of one sequence against its
// key/value cache (no tiling, no dropout; kernels/cpu/decode_attention.h). Dispatched on the tensors'
// device (kernels/device_dispatch.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera::kernels {

// q [n, heads, d]: the queries of positions past .. past+n-1. k_cache, v_cache [capacity >= past+n,
// kv_heads, d] hold the keys and values of positions 0 .. past+n-1. out [n, heads * d] (or any shape of
// that size). Causal: the query at position p attends to keys 0..p. Query head h reads kv head
// h / (heads / kv_heads).
void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& out, int64_t past,
                      float softmax_scale);

}  // namespace tessera::kernels
