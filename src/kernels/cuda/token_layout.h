// The CUDA implementation of kernels/token_layout.h over device pointers (kernels/cuda/token_layout.cu):
// plain copies, one thread per element, so the results are the CPU's bit for bit. Declared in every
// build, defined only in a CUDA one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::kernels::cuda {

// dst[j, i] = src[i, j] for src [rows, cols] of elem_bytes-sized elements (1, 2, 4 or 8 bytes).
void transpose_rows(const void* src, void* dst, int64_t rows, int64_t cols, size_t elem_bytes);
// positions[t] = first + t / batch for the seq * batch rows of a [seq, batch] layout.
void fill_positions(int32_t* positions, int64_t seq, int64_t batch, int64_t first);
// Megatron's grouped QKV rows to q, k, v and back (kernels/cpu/token_layout.h has the layout).
void split_qkv(const float* qkv, float* q, float* k, float* v, int64_t rows, int64_t groups, int64_t per_group,
               int64_t d);
void merge_qkv(const float* q, const float* k, const float* v, float* qkv, int64_t rows, int64_t groups,
               int64_t per_group, int64_t d);
// The index of the first id of ids [n] outside [lo, hi), or -1 when all are inside; that id in *id.
// Waits for the GPU (the answer is the host's). `device` is the CUDA ordinal ids live on (its allocator
// holds the result).
int64_t first_id_outside(const int32_t* ids, int64_t n, int64_t lo, int64_t hi, int device, int32_t* id);

}  // namespace tessera::kernels::cuda
