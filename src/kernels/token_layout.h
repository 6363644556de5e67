// Rearrangements of per-token data between the model's layouts, on tensors: sample-major micro-batches
// to the [seq, batch] activation layout, Megatron's grouped QKV rows to separate q, k, v and back,
// positions, and id range checks. Plain copies, with no arithmetic. Dispatched on the tensors' device
// (kernels/device_dispatch.h; the CPU code is kernels/cpu/token_layout.h, the CUDA code
// kernels/cuda/token_layout.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera::kernels {

// dst [cols, rows] = src [rows, cols] transposed, for 2-D tensors of any one element type.
void transpose_rows(const Tensor& src, const Tensor& dst);

// positions (int32, seq * batch elements, a [seq, batch] layout): row t gets first + t / batch, so
// each sample counts from `first` (0 for a micro-batch, the tokens already decoded for a decode step).
void fill_positions(const Tensor& positions, int64_t batch, int64_t first = 0);

// The fused QKV projection's rows are grouped as Megatron lays them out: for each query group, its
// per_group query heads, then its key head, then its value head (each d wide). split_qkv: qkv
// [rows, groups * (per_group + 2) * d] -> q [rows, groups * per_group, d], k and v [rows, groups, d]
// (rows, groups and d from k's shape); merge_qkv is its inverse.
void split_qkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, int64_t per_group);
void merge_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv, int64_t per_group);

// The first id of ids (int32) outside [lo, hi): its index, and the id itself, for the caller's message;
// index -1 when all are inside.
struct IdOutside {
  int64_t index = -1;
  int32_t id = 0;
};
IdOutside first_id_outside(const Tensor& ids, int64_t lo, int64_t hi);

}  // namespace tessera::kernels
