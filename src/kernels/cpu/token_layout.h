// The CPU implementation of kernels/token_layout.h, over host buffers: what the tensor-level entry points call
// once the tensors' device is checked, and what the kernel tests exercise directly.
// Rearrangements of per-token data the model needs between its layouts: sample-major micro-batches
// to the [seq, batch] activation layout, Megatron's grouped QKV rows to separate q, k, v and back, and
// default positions. Plain copies, with no arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::kernels::cpu {

// dst[j, i] = src[i, j] for src [rows, cols] of elem_bytes-sized elements.
void transpose_rows(const void* src, void* dst, int64_t rows, int64_t cols, size_t elem_bytes);

// positions[t] = first + t / batch for rows t of a [seq, batch] layout (each sample counts from first).
void fill_positions(int32_t* positions, int64_t seq, int64_t batch, int64_t first = 0);

// The fused QKV projection's rows are grouped as Megatron lays them out: for each query group, its
// per_group query heads, then its key head, then its value head (each d wide), so that splitting the
// weight by groups is a contiguous split. split_qkv: qkv [rows, groups * (per_group + 2) * d] ->
// q [rows, groups * per_group, d], k and v [rows, groups, d]; merge_qkv is its inverse.
void split_qkv(const float* qkv, float* q, float* k, float* v, int64_t rows, int64_t groups, int64_t per_group,
               int64_t d);
void merge_qkv(const float* q, const float* k, const float* v, float* qkv, int64_t rows, int64_t groups,
               int64_t per_group, int64_t d);

// The index of the first id outside [lo, hi), or -1 when all are inside.
int64_t first_id_outside(const int32_t* ids, int64_t n, int64_t lo, int64_t hi);

}  // namespace tessera::kernels::cpu
