// kernels/cuda/column_sums.h: the column sums of kernels/math/column_sums.h's order. Step 1 runs a
// thread per (chunk, column): adjacent threads read adjacent columns of a row (coalesced), a grid of
// ceil(cols / 256) x chunks blocks (GPT-2's 768 columns over 8192 rows: 768 blocks where one thread per
// column gave 3). Step 2, a thread per column, reads chunks floats down its column; the partials are
// rows / 32 times smaller than the matrix.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/allocator.h"
#include "kernels/cuda/column_sums.h"
#include "kernels/cuda/column_sums.cuh"

namespace tessera::kernels::cuda {
namespace {

__global__ void column_partials_kernel(const float* x, float* partial, int64_t rows, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int64_t k = blockIdx.y; k * math::kColumnSumRows < rows; k += gridDim.y) {
    const int64_t end = std::min(rows, (k + 1) * math::kColumnSumRows);
    float sum = 0.0f;
    for (int64_t r = k * math::kColumnSumRows; r < end; ++r) sum = __fadd_rn(sum, x[r * cols + c]);
    partial[k * cols + c] = sum;
  }
}

// Threads [0, cols) finish out, threads [cols, 2 cols) out2 when there is one.
__global__ void sum_column_partials_kernel(const float* partial, int64_t chunks, int64_t cols, float* out,
                                           const float* partial2, float* out2) {
  int64_t c = grid_index();
  if (c >= cols) {
    c -= cols;
    if (!out2 || c >= cols) return;
    partial = partial2, out = out2;
  }
  double acc = 0;
  for (int64_t k = 0; k < chunks; ++k) acc += partial[k * cols + c];
  out[c] += static_cast<float>(acc);
}

}  // namespace

DeviceScratch::DeviceScratch(int64_t count) : bytes_(static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(float)) {
  tessera::cuda::check(cudaGetDevice(&device_), "cudaGetDevice");
  data_ = static_cast<float*>(allocator_for(Device{DeviceType::CUDA, device_}).allocate(bytes_, 256));
}

DeviceScratch::~DeviceScratch() { allocator_for(Device{DeviceType::CUDA, device_}).deallocate(data_, bytes_); }

void sum_column_partials(const float* partial, int64_t chunks, int64_t cols, float* out, const float* partial2,
                         float* out2) {
  if (cols == 0) return;
  const int64_t threads = out2 ? 2 * cols : cols;
  sum_column_partials_kernel<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0, launch_stream()>>>(
      partial, chunks, cols, out, partial2, out2);
  check_launch("sum_column_partials");
}

void column_sums(const float* x, float* out, int64_t rows, int64_t cols) {
  if (cols == 0) return;
  const int64_t chunks = math::column_sum_chunks(rows);
  if (chunks == 0) return sum_column_partials(nullptr, 0, cols, out);  // adds 0, as the CPU
  DeviceScratch partial(chunks * cols);
  column_partials_kernel<<<column_partials_grid(rows, cols), kThreads, 0, launch_stream()>>>(x, partial.data(), rows,
                                                                                             cols);
  check_launch("column_sums");
  sum_column_partials(partial.data(), chunks, cols, out);
}

}  // namespace tessera::kernels::cuda
