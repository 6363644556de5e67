// The CPU implementation of kernels/decode_attention.h, over host buffers: what the tensor-level entry points call
// once the tensors' device is checked, and what the kernel tests exercise directly.
// Attention for incremental decoding: the new query rows of one sequence against its key/value cache.
// Each query reads every cached key once, so there is nothing to tile; no dropout (inference only).
#pragma once

#include <cstdint>

namespace tessera::kernels::cpu {

// q [n, heads, d]: the queries of positions past .. past+n-1. k_cache, v_cache [>= past+n, kv_heads, d]
// hold the keys and values of positions 0 .. past+n-1. out [n, heads, d]. Causal: the query at
// position p attends to keys 0..p. Query head h reads kv head h / (heads / kv_heads).
void attention_decode(const float* q, const float* k_cache, const float* v_cache, float* out, int64_t n,
                      int64_t past, int64_t heads, int64_t kv_heads, int64_t d, float softmax_scale);

}  // namespace tessera::kernels::cpu
