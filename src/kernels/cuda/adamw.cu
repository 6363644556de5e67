// The optimizer's kernels on the GPU (kernels/cuda/adamw.h): the AdamW step, one element per thread with
// the CPU's update (kernels/math/adamw.h), and the sum of squares: a double partial per fixed chunk of
// elements (one block each), then the partials summed by one block, so the same data give the same bits
// whatever the GPU. An inf or NaN gradient makes the sum non-finite, which is how the loss scaler and
// the trainer see an overflow (optim/adamw_optimizer.cc), as on the CPU.
#include <cuda_runtime.h>

#include "core/allocator.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/adamw.h"

namespace tessera::kernels::cuda {
namespace {

constexpr int64_t kChunk = 8192;  // elements per partial sum

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, math::AdamWCoeffs k) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) math::adamw_update_one(p[i], g[i] * k.grad_scale, m[i], v[i], k);
}

__global__ void chunk_sum_of_squares_kernel(const float* x, int64_t n, double* partial) {
  __shared__ double scratch[32];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int64_t end = begin + kChunk < n ? begin + kChunk : n;
  double acc = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) acc += static_cast<double>(x[i]) * x[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// *total = the sum of partial[0..chunks), by one block in a fixed order.
__global__ void sum_partials_kernel(const double* partial, int64_t chunks, double* total) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) acc += partial[c];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) *total = acc;
}

}  // namespace

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWHyper& h) {
  const math::AdamWCoeffs k = math::adamw_coeffs(h);
  if (n == 0) return;
  adamw_kernel<<<grid_for(n), kThreads>>>(param, grad, exp_avg, exp_avg_sq, n, k);
  check_launch("adamw_step");
}

double sum_of_squares(const float* x, int64_t n, int device) {
  if (n == 0) return 0.0;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  // The partials and the total, from the device's caching allocator (stream-ordered, so freed right
  // after the copy below, which waits for the kernels).
  Allocator& allocator = allocator_for(Device{DeviceType::CUDA, device});
  const size_t bytes = static_cast<size_t>(chunks + 1) * sizeof(double);
  double* partial = static_cast<double*>(allocator.allocate(bytes, 256));
  double total = 0;
  try {
    chunk_sum_of_squares_kernel<<<static_cast<unsigned>(chunks), kThreads>>>(x, n, partial);
    check_launch("sum_of_squares");
    sum_partials_kernel<<<1, kThreads>>>(partial, chunks, partial + chunks);
    check_launch("sum_of_squares");
    tessera::cuda::check(cudaMemcpy(&total, partial + chunks, sizeof(double), cudaMemcpyDeviceToHost),
                         "sum_of_squares");
  } catch (...) {
    allocator.deallocate(partial, bytes);
    throw;
  }
  allocator.deallocate(partial, bytes);
  return total;
}

}  // namespace tessera::kernels::cuda
