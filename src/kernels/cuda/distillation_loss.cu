// Knowledge distillation's fused loss over a vocabulary shard on the GPU (kernels/cuda/distillation_loss.h).
// The statistics: one block per row; the maxima of s / τ and t / τ over the scaled values' bits mapped to
// ordered integers (exact in any order, as the CPU's loop), then the student's and the teacher's sums of
// exponentials and the cross sum in double across the block (the CPU adds them in column order, so the
// sums agree to fp32 rounding, not bit for bit). The KL sum: one block over the rows in a fixed order,
// copied back once. The backward: one element per thread, in place, the CPU's formula per element.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/allocator.h"
#include "core/check.h"
#include "kernels/cuda/block_max.cuh"
#include "kernels/cuda/distillation_loss.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/distillation.h"
#include "kernels/math/softmax.h"

namespace tessera::kernels::cuda {
namespace {

__device__ inline float block_max_of(int32_t ordered, int32_t* scratch) {
  return __int_as_float(ordered_bits(block_max(ordered, scratch)));
}

__global__ void kd_stats_kernel(const float* student, const float* teacher, float inv, float* stats, int64_t rows,
                                int64_t vocab_local) {
  __shared__ int32_t int_scratch[32];
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const float* s = student + r * vocab_local;
  const float* t = teacher + r * vocab_local;
  int32_t so = ordered_bits(__float_as_int(-INFINITY)), to = so;
  for (int64_t j = threadIdx.x; j < vocab_local; j += blockDim.x) {
    const int32_t a = ordered_bits(__float_as_int(s[j] * inv)), b = ordered_bits(__float_as_int(t[j] * inv));
    so = a > so ? a : so;
    to = b > to ? b : to;
  }
  const float s_max = block_max_of(so, int_scratch), t_max = block_max_of(to, int_scratch);
  double s_sum = 0, t_sum = 0, cross = 0;
  for (int64_t j = threadIdx.x; j < vocab_local; j += blockDim.x) {
    const float sj = s[j] * inv, tj = t[j] * inv;
    const double w = math::softmax_weight(tj, t_max);
    s_sum += math::softmax_weight(sj, s_max);
    t_sum += w;
    cross += w * (static_cast<double>(tj) - static_cast<double>(sj));
  }
  s_sum = block_sum(s_sum, scratch);
  t_sum = block_sum(t_sum, scratch);
  cross = block_sum(cross, scratch);
  if (threadIdx.x == 0) {
    stats[kStudentMax * rows + r] = s_max;
    stats[kTeacherMax * rows + r] = t_max;
    stats[kStudentSumExp * rows + r] = static_cast<float>(s_sum);
    stats[kTeacherSumExp * rows + r] = static_cast<float>(t_sum);
    stats[kCrossSum * rows + r] = static_cast<float>(cross);
  }
}

// kd_lse [2, rows] and *total = sum_r loss_mask[r] KL_r, by one block (a fixed order for a given size).
__global__ void kd_kl_sum_kernel(const float* stats, const float* loss_mask, float* kd_lse, int64_t rows,
                                 double* total) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const double s_max = stats[kStudentMax * rows + r], t_max = stats[kTeacherMax * rows + r];
    const double s_sum = stats[kStudentSumExp * rows + r], t_sum = stats[kTeacherSumExp * rows + r];
    kd_lse[r] = static_cast<float>(s_max + log(s_sum));
    kd_lse[rows + r] = static_cast<float>(t_max + log(t_sum));
    acc += math::distillation_row_kl(s_max, t_max, s_sum, t_sum, stats[kCrossSum * rows + r]) * loss_mask[r];
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) *total = acc;
}

// logits[r, j] <- the cross-entropy's dlogit (the one-hot term before scaling) + the KD term's.
__global__ void kd_backward_kernel(float* logits, const float* teacher, const int32_t* targets, const float* lse,
                                   const float* dce, const float* kd_lse, const float* dkd, float inv, int64_t rows,
                                   int64_t vocab_local, int64_t vocab_begin, DType round_output) {
  const int64_t n = rows * vocab_local;
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const int64_t r = i / vocab_local, j = i % vocab_local;
    const float x = logits[i], l = lse[r], d = dce[r];
    const bool target = static_cast<int64_t>(targets[r]) - vocab_begin == j;
    const float ce = target ? math::cross_entropy_dlogit_target(x, l, d) : math::cross_entropy_dlogit(x, l, d);
    const float g = ce + math::distillation_dlogit(x, teacher[i], inv, kd_lse[r], kd_lse[rows + r], dkd[r]);
    logits[i] = round_value(round_output, g);
  }
}

}  // namespace

void distillation_shard_stats(const float* student, const float* teacher, float temperature, float* stats,
                              int64_t rows, int64_t vocab_local) {
  TESSERA_CHECK(vocab_local > 0, "distillation_shard_stats: empty vocabulary shard");
  TESSERA_CHECK(temperature > 0, "distillation_shard_stats: temperature ", temperature, " is not positive");
  if (rows == 0) return;
  kd_stats_kernel<<<static_cast<unsigned>(rows), kThreads, 0, launch_stream()>>>(student, teacher, 1.0f / temperature,
                                                                                 stats, rows, vocab_local);
  check_launch("distillation_shard_stats");
}

double distillation_kl_sum(const float* stats, const float* loss_mask, float* kd_lse, int64_t rows, int device) {
  if (rows == 0) return 0.0;
  // The sum, from the device's caching allocator (stream-ordered: freed right after the copy, which waits
  // for the kernel).
  Allocator& allocator = allocator_for(Device{DeviceType::CUDA, device});
  double* total = static_cast<double*>(allocator.allocate(sizeof(double), 256));
  double result = 0;
  try {
    kd_kl_sum_kernel<<<1, kThreads, 0, launch_stream()>>>(stats, loss_mask, kd_lse, rows, total);
    check_launch("distillation_kl_sum");
    copy_and_wait(&result, total, sizeof(double), cudaMemcpyDeviceToHost, "distillation_kl_sum");
  } catch (...) {
    allocator.deallocate(total, sizeof(double));
    throw;
  }
  allocator.deallocate(total, sizeof(double));
  return result;
}

void distillation_backward(float* logits, const float* teacher, const int32_t* targets, const float* lse,
                           const float* dce, const float* kd_lse, const float* dkd, float temperature, int64_t rows,
                           int64_t vocab_local, int64_t vocab_begin, DType round_output) {
  TESSERA_CHECK(temperature > 0, "distillation_backward: temperature ", temperature, " is not positive");
  TESSERA_CHECK(round_output == DType::F32 || round_output == DType::BF16 || round_output == DType::F16,
                "distillation_backward: ", dtype_name(round_output), " is not a floating-point compute type");
  if (rows * vocab_local == 0) return;
  kd_backward_kernel<<<grid_for(rows * vocab_local), kThreads, 0, launch_stream()>>>(
      logits, teacher, targets, lse, dce, kd_lse, dkd, 1.0f / temperature, rows, vocab_local, vocab_begin,
      round_output);
  check_launch("distillation_backward");
}

}  // namespace tessera::kernels::cuda
