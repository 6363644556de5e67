// The linear layer's bias gradient on the GPU (kernels/cuda/linear.h): one thread per column, summing
// dy down its column in row order in fp32, the order and precision of the CPU's bias_grad
// (kernels/cpu/linear.cc), so that both give the same bits. Adjacent threads read adjacent columns, so
// each row's reads are coalesced. (cuBLASLt's BGRADB epilogue would fuse this into the dw GEMM, but
// sums in an order of its own.)
#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/linear.h"

namespace tessera::kernels::cuda {
namespace {

__global__ void bias_grad_kernel(const float* dy, float* db, int64_t rows, int64_t out) {
  const int64_t j = grid_index();
  if (j >= out) return;
  float sum = 0.0f;
  for (int64_t r = 0; r < rows; ++r) sum += dy[r * out + j];
  db[j] += sum;
}

}  // namespace

void linear_bias_grad(const float* dy, float* db, int64_t rows, int64_t out) {
  if (out == 0) return;
  bias_grad_kernel<<<static_cast<unsigned>((out + kThreads - 1) / kThreads), kThreads>>>(dy, db, rows, out);
  check_launch("linear_bias_grad");
}

}  // namespace tessera::kernels::cuda
