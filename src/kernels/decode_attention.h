// Attention for incremental decoding on tensors: the new query rows of several sequences, each against
// its key/value cache in blocks of a shared pool (no tiling, no dropout; kernels/cpu/decode_attention.h).
// Dispatched on the tensors' device (kernels/device_dispatch.h).
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace tessera::kernels {

// One sequence's part of a decoding step: `rows` query rows (after the previous sequences' rows) at
// positions past .. past + rows - 1. Position p's key and value lie at row p % block_size of pool block
// blocks[p / block_size]; blocks covers at least past + rows positions.
struct PagedRows {
  int64_t rows = 0, past = 0;
  std::span<const int32_t> blocks;
};

// q [Σ rows, heads, d]: each sequence's queries of positions past .. past + rows - 1, sequence after
// sequence. k_pool, v_pool [pool blocks, block size, kv_heads, d] hold the keys and values of positions
// 0 .. past + rows - 1 of every sequence. out [Σ rows, heads * d] (or any shape of that size). Causal:
// the query at position p attends to its sequence's keys 0..p. Query head h reads kv head
// h / (heads / kv_heads).
void attention_decode(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool, const Tensor& out,
                      std::span<const PagedRows> sequences, float softmax_scale);

// Stores the step's new keys and values k, v [Σ rows, kv_heads, d] at their sequences' positions in the
// pools.
void write_kv_cache(const Tensor& k, const Tensor& v, const Tensor& k_pool, const Tensor& v_pool,
                    std::span<const PagedRows> sequences);

}  // namespace tessera::kernels
