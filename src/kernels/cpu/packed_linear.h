// The CPU implementation of kernels/packed_linear.h, over host buffers.
#pragma once

#include <cstdint>

namespace tessera::kernels::cpu {

// Weight rows per packed block: two 16-float vectors of outputs per k.
inline constexpr int64_t kPackedColumns = 32;

// w [out, in] -> packed [ceil(out / 32), in, 32]: block b holds w[32 b + c, k] at (b, k, c), zero past out.
void pack_linear_weight(const float* w, float* packed, int64_t out, int64_t in);

// x [rows, in], packed from pack_linear_weight, b [out] or null -> y [rows, out] (overwritten).
// y[i, j] = (sum over k = 0, 1, ..., in - 1 of x[i, k] w[j, k], in that order) + b[j]: the same bits
// whatever the number of rows and threads.
void packed_linear_forward(const float* x, const float* packed, const float* b, float* y, int64_t rows, int64_t in,
                           int64_t out);

}  // namespace tessera::kernels::cpu
