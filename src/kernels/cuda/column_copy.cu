// The column copies and sums on the GPU (kernels/cuda/column_copy.h): a grid-stride loop over the
// dst_rows * count elements written, consecutive threads on consecutive columns of a row (contiguous
// when the steps are 1). A sum's thread adds its terms one after another in float, from 0, in the CPU
// loop's order: the same additions, so the same bits (no product, so no fused multiply-add either).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/column_copy.h"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

// The layout of one call: src's and dst's widths, first columns and steps.
struct ColumnLayout {
  int64_t src_width, src_first, src_step, dst_width, dst_first, dst_step, count, repeat;
};

__global__ void copy_columns_kernel(const float* src, float* dst, int64_t n, ColumnLayout l) {
  for (int64_t e = grid_index(); e < n; e += grid_stride()) {
    const int64_t r = e / l.count, j = e % l.count;
    const float v = src[(r / l.repeat) * l.src_width + l.src_first + j * l.src_step];
    dst[r * l.dst_width + l.dst_first + j * l.dst_step] = v;
  }
}

__global__ void sum_columns_kernel(const float* src, float* dst, int64_t n, ColumnLayout l) {
  for (int64_t e = grid_index(); e < n; e += grid_stride()) {
    const int64_t r = e / l.count, j = e % l.count;
    const float* s = src + r * l.repeat * l.src_width + l.src_first + j * l.src_step;
    float sum = 0;
    for (int64_t i = 0; i < l.repeat; ++i) sum += s[i * l.src_width];
    dst[r * l.dst_width + l.dst_first + j * l.dst_step] = sum;
  }
}

}  // namespace

void copy_columns(const float* src, int64_t src_width, int64_t src_first, int64_t src_step, float* dst,
                  int64_t dst_rows, int64_t dst_width, int64_t dst_first, int64_t dst_step, int64_t count,
                  int64_t repeat) {
  const int64_t n = dst_rows * count;
  if (n == 0) return;
  const ColumnLayout l{src_width, src_first, src_step, dst_width, dst_first, dst_step, count, repeat};
  copy_columns_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(src, dst, n, l);
  check_launch("copy_columns");
}

void sum_columns(const float* src, int64_t src_width, int64_t src_first, int64_t src_step, float* dst,
                 int64_t dst_rows, int64_t dst_width, int64_t dst_first, int64_t dst_step, int64_t count,
                 int64_t repeat) {
  const int64_t n = dst_rows * count;
  if (n == 0) return;
  const ColumnLayout l{src_width, src_first, src_step, dst_width, dst_first, dst_step, count, repeat};
  sum_columns_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(src, dst, n, l);
  check_launch("sum_columns");
}

}  // namespace tessera::kernels::cuda
