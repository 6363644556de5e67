// The one order in which Tessera sums a matrix down its columns (the linear layers' bias gradient,
// LayerNorm's and RMSNorm's weight and bias gradients), on the CPU and on the GPU alike, so that both
// give the same bits whatever the thread count or the launch (issue 50, item 3):
//   1. the rows are cut into chunks of kColumnSumRows; for each chunk k and column c, the partial
//      p[k][c] is the fp32 sum, in row order starting from 0, of the column's terms over the chunk's rows;
//   2. out[c] += (float) (the double sum, in chunk order starting from 0, of p[k][c]).
// A GPU then runs one thread per (chunk, column) with many blocks, where a sum down whole columns gives
// one thread per column (768 columns: 3 blocks on 132 SMs); the CPU one task per chunk.
// A norm's weight-gradient term is dy * xhat with xhat = (x - mean) * rstd, each operation rounded on its
// own (the files using it are compiled with -ffp-contract=off; nvcc's fused multiply-add is avoided by
// core/host_device.h's *_rn): RMSNorm passes mean 0, which gives its x * rstd exactly.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace tessera::kernels::math {

inline constexpr int64_t kColumnSumRows = 32;

TESSERA_HOST_DEVICE inline int64_t column_sum_chunks(int64_t rows) {
  return (rows + kColumnSumRows - 1) / kColumnSumRows;
}

TESSERA_HOST_DEVICE inline float norm_weight_grad_term(float dy, float x, float mean, float rstd) {
  return mul_rn(dy, mul_rn(sub_rn(x, mean), rstd));
}

}  // namespace tessera::kernels::math
