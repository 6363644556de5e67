// A linear layer y = x W^T + b over the few rows of a decoding step (one per sequence), from a copy of W
// packed once (issue 40). A decoding step reads every weight once and multiplies it by a few rows, so it
// is bound by reading W; oneDNN's matmul, which reorders W for each call, took 1.3x as long for 8 rows
// of the output layer as for one and 2x for 32. The packed copy holds W in blocks of 32 outputs stored k
// by k ([out / 32, in, 32]), so each block is one contiguous stream read once for all rows, and each
// x[i, k] multiplies 32 outputs at once: no per-call reorder, no horizontal sums.
//
// y[i, j] is x[i, :] . w[j, :] summed over k in order, plus the bias: the same bits whatever the number
// of rows and threads, so a sequence's logits do not depend on what else is in the batch. The packed
// copy doubles the memory of the weights it is made for; model::ParameterSet keeps such copies only
// when asked (ParameterSet::keep_packed_weights: a loaded model that serves, whose weights do not change).
#pragma once

#include "core/tensor.h"

namespace tessera::kernels {

// Rows up to which a packed product is used (more rows: oneDNN's blocked GEMM, which reuses W from
// cache across rows as well; bench/small_rows_gemm).
inline constexpr int64_t kPackedLinearMaxRows = 64;

// w [out, in] -> a new packed copy, [ceil(out / 32), in, 32].
Tensor pack_linear_weight(const Tensor& w);
// x [rows, in] (any shape of rows * in elements), packed from pack_linear_weight, b [out] or undefined
// -> y [rows, out] (overwritten; out is y's last dimension). fp32 throughout.
void packed_linear_forward(const Tensor& x, const Tensor& packed, const Tensor& b, const Tensor& y);

}  // namespace tessera::kernels
