// The optimizer's kernels on the GPU (kernels/cuda/adamw.h): the AdamW step, one element per thread with
// the CPU's update (kernels/math/adamw.h), and the sum of squares: a double partial per fixed chunk of
// elements (one block each), then the partials summed by one block, so the same data give the same bits
// whatever the GPU. An inf or NaN gradient makes the sum non-finite, which is how the loss scaler and
// the trainer see an overflow (optim/adamw_optimizer.cc), as on the CPU. And the one-launch forms: the
// gradient norm with the step's clip factor left on the device, and the multi-tensor AdamW over a table
// of segments that reads it.
#include <cuda_runtime.h>

#include "core/allocator.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/adamw.h"
#include "kernels/math/blocked_sum.h"

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

static_assert(math::kBlockedLanes == kThreads, "the CPU's blocked order assumes the GPU's block size");

// The blocked sum of squares in one launch: each block writes its chunk's partial (lane = thread, as
// kernels/math/blocked_sum.h), and the last block to finish (a counter, zero at launch) sums the
// partials in the same order and writes the step's scalars.
__global__ void grad_norm_kernel(const float* x, int64_t n, double* partial, unsigned* done, float clip_grad,
                                 float loss_scale, StepScalars* out) {
  __shared__ double scratch[32];
  __shared__ bool last;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * math::kBlockedChunk;
  const int64_t end = begin + math::kBlockedChunk < n ? begin + math::kBlockedChunk : n;
  double acc = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = x[i];
    acc = math::dadd_rn(acc, math::dmul_rn(v, v));
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = acc;
    __threadfence();  // the partial is visible before the count says so
    last = atomicAdd(done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  double total = 0;
  for (int64_t c = threadIdx.x; c < gridDim.x; c += blockDim.x) total = math::dadd_rn(total, __ldcg(partial + c));
  total = block_sum(total, scratch);
  if (threadIdx.x == 0) {
    out->sum_of_squares = total;
    math::step_scalars_of(total, clip_grad, loss_scale, &out->grad_norm, &out->clip_scale);
  }
}

// The multi-tensor step: element k of the packed segments lies in the last segment whose packed start
// is <= k (a binary search over the table's first column).
__global__ void adamw_multi_kernel(float* p, const float* g, float* m, float* v, const int64_t* table,
                                   int64_t segments, int64_t total, math::AdamWCoeffs decayed, math::AdamWCoeffs kept,
                                   const StepScalars* scalars) {
  const float scale = scalars->clip_scale;
  if (!isfinite(scale)) return;  // the norm overflowed: no step
  for (int64_t k = grid_index(); k < total; k += grid_stride()) {
    int64_t lo = 0, hi = segments - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (table[5 * mid] <= k) lo = mid; else hi = mid - 1;
    }
    const int64_t* row = table + 5 * lo;
    const int64_t off = k - row[0], i = row[1] + off, s = row[3] + off;
    math::adamw_update_one(p[i], g[i] * scale, m[s], v[s], row[4] ? decayed : kept);
  }
}

}  // namespace

void grad_norm_and_clip(const float* x, int64_t n, float clip_grad, float loss_scale, StepScalars* scalars,
                        int device) {
  const int64_t chunks = (n + math::kBlockedChunk - 1) / math::kBlockedChunk;
  if (chunks == 0) {  // no gradients: the scalars of a zero sum, from the host
    StepScalars zero;
    math::step_scalars_of(0.0, clip_grad, loss_scale, &zero.grad_norm, &zero.clip_scale);
    copy_and_wait(scalars, &zero, sizeof(zero), cudaMemcpyHostToDevice, "grad_norm_and_clip");  // &zero: this stack
    return;
  }
  // The partials and the counter from the device's caching allocator (stream-ordered: freed once the
  // kernel is queued, reused only by later work on the same stream).
  Allocator& allocator = allocator_for(Device{DeviceType::CUDA, device});
  const size_t bytes = static_cast<size_t>(chunks) * sizeof(double) + sizeof(unsigned);
  double* partial = static_cast<double*>(allocator.allocate(bytes, 256));
  unsigned* done = reinterpret_cast<unsigned*>(partial + chunks);
  try {
    tessera::cuda::check(cudaMemsetAsync(done, 0, sizeof(unsigned), launch_stream()), "grad_norm_and_clip");
    grad_norm_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, launch_stream()>>>(x, n, partial, done, clip_grad,
                                                                                      loss_scale, scalars);
    check_launch("grad_norm_and_clip");
  } catch (...) {
    allocator.deallocate(partial, bytes);
    throw;
  }
  allocator.deallocate(partial, bytes);
}

void adamw_multi_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const int64_t* table,
                      int64_t segments, int64_t total, const AdamWHyper& h, const StepScalars* scalars) {
  if (total == 0 || segments == 0) return;
  AdamWHyper without = h;
  without.weight_decay = 0;
  adamw_multi_kernel<<<grid_for(total), kThreads, 0, launch_stream()>>>(param, grad, exp_avg, exp_avg_sq, table,
                                                                        segments, total, math::adamw_coeffs(h),
                                                                        math::adamw_coeffs(without), scalars);
  check_launch("adamw_multi_step");
}

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n, const AdamWHyper& h) {
  const math::AdamWCoeffs k = math::adamw_coeffs(h);
  if (n == 0) return;
  adamw_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(param, grad, exp_avg, exp_avg_sq, n, k);
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
    chunk_sum_of_squares_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, launch_stream()>>>(x, n, partial);
    check_launch("sum_of_squares");
    sum_partials_kernel<<<1, kThreads, 0, launch_stream()>>>(partial, chunks, partial + chunks);
    check_launch("sum_of_squares");
    copy_and_wait(&total, partial + chunks, sizeof(double), cudaMemcpyDeviceToHost, "sum_of_squares");
  } catch (...) {
    allocator.deallocate(partial, bytes);
    throw;
  }
  allocator.deallocate(partial, bytes);
  return total;
}

}  // namespace tessera::kernels::cuda
