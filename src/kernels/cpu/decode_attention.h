// The CPU implementation of kernels/decode_attention.h, over host buffers: what the tensor-level entry points call
// once the tensors' device is checked, and what the kernel tests exercise directly.
// Attention for incremental decoding: the new query rows of several sequences, each against its own
// key/value cache held in blocks of a shared pool (as vLLM's paged attention). Each query reads every
// cached key once, so there is nothing to tile; no dropout (inference only).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/decode_attention.h"  // PagedRows

namespace tessera::kernels::cpu {

// q [Σ rows, heads, d]; k_pool, v_pool [pool blocks, block_size, kv_heads, d] hold every position up to
// past + rows - 1 of each sequence. out [Σ rows, heads, d]. Causal: the query at position p attends to
// its sequence's keys 0..p. Query head h reads kv head h / (heads / kv_heads).
void attention_decode(const float* q, const float* k_pool, const float* v_pool, float* out,
                      std::span<const PagedRows> sequences, int64_t block_size, int64_t heads, int64_t kv_heads,
                      int64_t d, float softmax_scale);

// Stores the new keys and values k, v [Σ rows, kv_heads, d] at their positions in the pool.
void write_kv_cache(const float* k, const float* v, float* k_pool, float* v_pool, std::span<const PagedRows> sequences,
                    int64_t block_size, int64_t kv_heads, int64_t d);

}  // namespace tessera::kernels::cpu
