// Copies between column ranges of row-major tensors, as Multi-Latent Attention (model/
// multi_latent_attention.h) needs them: a latent and its RoPE key split out of one projection, each
// head's no-RoPE and RoPE parts joined into its query and key, the one shared RoPE key broadcast over
// the heads (and its gradient summed back over them), and DeepSeek's interleaved RoPE dimensions
// (x0, x1, x2, ...) taken as Megatron's rotate_half halves (x0, x2, ..., x1, x3, ...). Plain copies and
// sums, dispatched on the tensors' device (kernels/device_dispatch.h): kernels/cpu/column_copy.h, and
// kernels/cuda/column_copy.h, whose results are the CPU's bit for bit (a sum adds in the same order).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera::kernels {

// Columns of a tensor seen as rows of its last dimension: `first` is the first column, `step` the
// distance between consecutive ones (2: every other column).
struct Columns {
  int64_t first = 0, step = 1;
};

// dst[r, to.first + j * to.step] = src[r / repeat, from.first + j * from.step] for j < count, every row r of
// dst (the rows are numel / last dimension; src has dst's rows / repeat). repeat > 1 broadcasts each row
// of src to `repeat` consecutive rows of dst (one key head to every head of a token).
void copy_columns(const Tensor& src, Columns from, const Tensor& dst, Columns to, int64_t count, int64_t repeat = 1);
// The transpose of the broadcast: dst[r, to.first + j * to.step] = sum over i < repeat of
// src[r * repeat + i, from.first + j * from.step] (overwritten), summed in order of i.
void sum_columns(const Tensor& src, Columns from, const Tensor& dst, Columns to, int64_t count, int64_t repeat);

}  // namespace tessera::kernels
