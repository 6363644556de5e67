// The linear layer's bias gradient on the GPU (kernels/cuda/linear.h): the column sums of dy in
// kernels/math/column_sums.h's fixed order (kernels/cuda/column_sums.cu), the order and precision of the
// CPU's bias_grad (kernels/cpu/linear.cc), so that both give the same bits. (cuBLASLt's BGRADB epilogue
// would fuse this into the dw GEMM, but sums in an order of its own.)
#include "kernels/cuda/column_sums.h"
#include "kernels/cuda/linear.h"

namespace tessera::kernels::cuda {

void linear_bias_grad(const float* dy, float* db, int64_t rows, int64_t out) { column_sums(dy, db, rows, out); }

}  // namespace tessera::kernels::cuda
