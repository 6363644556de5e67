// The MoE combine arithmetic on the GPU (kernels/cuda/moe_combine.h): the CPU loops of
// kernels/cpu/moe_combine.cc, one thread per element (scale_rows), per routing row (the slot scatter)
// or per token (the residual mix, whose per-token sums run serially in column order as the CPU's).
// Compiled with -fmad=false (CMakeLists.txt), as the CPU file is without contraction.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/moe_combine.h"
#include "kernels/math/two_way_mix.h"

namespace tessera::kernels::cuda {
namespace {

__global__ void scale_rows_kernel(float* rows, const float* weight, int64_t n, int64_t h) {
  for (int64_t e = grid_index(); e < n * h; e += grid_stride()) rows[e] *= weight[e / h];
}

// Distinct slots: no two threads add into one value, so the add is the CPU's whatever the order.
__global__ void scatter_slot_kernel(const float* values, const int32_t* slot, int64_t n, float* out) {
  for (int64_t r = grid_index(); r < n; r += grid_stride())
    if (slot[r] >= 0) out[slot[r]] += values[r];
}

__global__ void mix_forward_kernel(const float* a, const float* b, const float* logits, float* y, int64_t rows,
                                   int64_t h) {
  for (int64_t e = grid_index(); e < rows * h; e += grid_stride()) {
    double c0, c1;
    math::softmax2(logits + 2 * (e / h), c0, c1);
    y[e] = math::two_way_mix(a[e], b[e], c0, c1);
  }
}

__global__ void mix_backward_kernel(const float* a, const float* b, const float* logits, const float* dy, float* da,
                                    float* db, float* dlogits, int64_t rows, int64_t h) {
  for (int64_t t = grid_index(); t < rows; t += grid_stride())
    math::two_way_mix_backward_row(a + t * h, b + t * h, logits + 2 * t, dy + t * h, da + t * h, db + t * h,
                                   dlogits + 2 * t, h);
}

}  // namespace

void scale_rows(float* rows, const float* weight, int64_t n, int64_t h) {
  if (n * h == 0) return;
  scale_rows_kernel<<<grid_for(n * h), kThreads, 0, launch_stream()>>>(rows, weight, n, h);
  check_launch("scale_rows");
}

void scatter_slot_values(const float* values, const int32_t* slot, int64_t n, float* out) {
  if (n == 0) return;
  scatter_slot_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(values, slot, n, out);
  check_launch("scatter_slot_values");
}

void two_way_mix_forward(const float* a, const float* b, const float* logits, float* y, int64_t rows, int64_t h) {
  if (rows * h == 0) return;
  mix_forward_kernel<<<grid_for(rows * h), kThreads, 0, launch_stream()>>>(a, b, logits, y, rows, h);
  check_launch("two_way_mix_forward");
}

void two_way_mix_backward(const float* a, const float* b, const float* logits, const float* dy, float* da, float* db,
                          float* dlogits, int64_t rows, int64_t h) {
  if (rows == 0) return;
  mix_backward_kernel<<<grid_for(rows), kThreads, 0, launch_stream()>>>(a, b, logits, dy, da, db, dlogits, rows, h);
  check_launch("two_way_mix_backward");
}

}  // namespace tessera::kernels::cuda
