// Fused softmax cross-entropy over a vocabulary shard on the GPU (kernels/cuda/cross_entropy.h). The
// statistics: one block per row; the max over the logits' bits mapped to ordered integers, as the CPU
// takes it (kernels/cpu/cross_entropy.cc: exact in any order, and a NaN wins so it reaches the loss),
// then sum exp(x - max) in double across the block. The backward: one element per thread, in place.
// And the per-row combination of the vocab-parallel loss (kernels/cuda/vocab_parallel_loss.h): the
// rescaling elementwise, the masked loss sum by one block in a fixed order. And the fused training pass
// (statistics and gradient by one block per row, fp32 or bf16 logits).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/allocator.h"
#include "core/check.h"
#include "kernels/cuda/block_max.cuh"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/vocab_parallel_loss.h"
#include "kernels/math/softmax.h"

namespace tessera::kernels::cuda {
namespace {

__global__ void shard_stats_kernel(const float* logits, const int32_t* targets, float* max_out, float* sumexp_out,
                                   float* target_logit_out, int64_t vocab_local, int64_t vocab_begin) {
  __shared__ int32_t int_scratch[32];
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const float* x = logits + r * vocab_local;
  int32_t mo = ordered_bits(__float_as_int(-INFINITY));
  for (int64_t j = threadIdx.x; j < vocab_local; j += blockDim.x) {
    const int32_t o = ordered_bits(__float_as_int(x[j]));
    mo = o > mo ? o : mo;
  }
  const float m = __int_as_float(ordered_bits(block_max(mo, int_scratch)));
  double s = 0;
  for (int64_t j = threadIdx.x; j < vocab_local; j += blockDim.x) s += math::softmax_weight(x[j], m);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    const int64_t t = static_cast<int64_t>(targets[r]) - vocab_begin;
    max_out[r] = m;
    sumexp_out[r] = static_cast<float>(s);
    target_logit_out[r] = t >= 0 && t < vocab_local ? x[t] : 0.0f;
  }
}

// logits[r, j] <- (softmax - one-hot) * dloss[r], the one-hot term taken before scaling (math/softmax.h).
__global__ void backward_kernel(float* logits, const int32_t* targets, const float* lse, const float* dloss, int64_t n,
                                int64_t vocab_local, int64_t vocab_begin, DType round_output) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const int64_t r = i / vocab_local, j = i % vocab_local;
    const bool target = static_cast<int64_t>(targets[r]) - vocab_begin == j;
    const float g = target ? math::cross_entropy_dlogit_target(logits[i], lse[r], dloss[r])
                           : math::cross_entropy_dlogit(logits[i], lse[r], dloss[r]);
    logits[i] = round_value(round_output, g);
  }
}

// A logit as fp32: itself, or bf16 storage widened; and a gradient stored back in the logits' type.
__device__ inline float load_logit(const float* x, int64_t j) { return x[j]; }
__device__ inline float load_logit(const uint16_t* x, int64_t j) { return bf16_to_fp32(x[j]); }
__device__ inline void store_grad(float* x, int64_t j, float g, DType round_output) { x[j] = round_value(round_output, g); }
__device__ inline void store_grad(uint16_t* x, int64_t j, float g, DType) { x[j] = fp32_to_bf16(g); }

// The fused training pass, one block per row (llm.c's fused classifier): the max and the sum of
// exponentials as shard_stats_kernel takes them, lse as masked_loss_sum makes it, then the gradient of
// backward_kernel over the same row, which the block's earlier passes left in L2.
template <typename T>
__global__ void fused_kernel(T* logits, const int32_t* targets, const float* dloss, float* max_out, float* sumexp_out,
                             float* target_logit_out, float* lse_out, int64_t vocab, DType round_output) {
  __shared__ int32_t int_scratch[32];
  __shared__ double scratch[32];
  __shared__ float row_lse, target_logit;
  const int64_t r = blockIdx.x;
  T* x = logits + r * vocab;
  int32_t mo = ordered_bits(__float_as_int(-INFINITY));
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const int32_t o = ordered_bits(__float_as_int(load_logit(x, j)));
    mo = o > mo ? o : mo;
  }
  const float m = __int_as_float(ordered_bits(block_max(mo, int_scratch)));
  double s = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) s += math::softmax_weight(load_logit(x, j), m);
  s = block_sum(s, scratch);
  const int64_t t = targets[r];
  if (threadIdx.x == 0) {
    const float sum = static_cast<float>(s);
    target_logit = t >= 0 && t < vocab ? load_logit(x, t) : 0.0f;  // read before any thread overwrites it
    row_lse = m + logf(sum);
    max_out[r] = m;
    sumexp_out[r] = sum;
    target_logit_out[r] = target_logit;
    lse_out[r] = row_lse;
  }
  __syncthreads();
  const float l = row_lse, d = dloss[r];
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float g = j == t ? math::cross_entropy_dlogit_target(target_logit, l, d)
                           : math::cross_entropy_dlogit(load_logit(x, j), l, d);
    store_grad(x, j, g, round_output);
  }
}

__global__ void rescale_sum_exp_kernel(float* sumexp, const float* max, const float* global_max, int64_t rows) {
  for (int64_t r = grid_index(); r < rows; r += grid_stride()) sumexp[r] *= expf(max[r] - global_max[r]);
}

// lse[r] = max[r] + log(sumexp[r]); *total = sum_r (lse[r] - target[r]) * loss_mask[r] in double, or
// *total += that sum where `accumulate` (a loss total kept on the device across micro-batches).
__global__ void masked_loss_sum_kernel(const float* max, const float* sumexp, const float* target,
                                       const float* loss_mask, float* lse, int64_t rows, double* total,
                                       bool accumulate) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    lse[r] = max[r] + logf(sumexp[r]);
    acc += static_cast<double>(lse[r] - target[r]) * loss_mask[r];
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) *total = accumulate ? *total + acc : acc;
}

}  // namespace

void rescale_sum_exp(float* sumexp, const float* max, const float* global_max, int64_t rows) {
  if (rows == 0) return;
  rescale_sum_exp_kernel<<<grid_for(rows), kThreads, 0, launch_stream()>>>(sumexp, max, global_max, rows);
  check_launch("rescale_sum_exp");
}

double masked_loss_sum(const float* max, const float* sumexp, const float* target, const float* loss_mask,
                       float* lse, int64_t rows, int device) {
  if (rows == 0) return 0.0;
  // The total, from the device's caching allocator (stream-ordered: freed right after the copy, which
  // waits for the kernel).
  Allocator& allocator = allocator_for(Device{DeviceType::CUDA, device});
  double* total = static_cast<double*>(allocator.allocate(sizeof(double), 256));
  double result = 0;
  try {
    masked_loss_sum_kernel<<<1, kThreads, 0, launch_stream()>>>(max, sumexp, target, loss_mask, lse, rows, total,
                                                                false);
    check_launch("masked_loss_sum");
    copy_and_wait(&result, total, sizeof(double), cudaMemcpyDeviceToHost, "masked_loss_sum");
  } catch (...) {
    allocator.deallocate(total, sizeof(double));
    throw;
  }
  allocator.deallocate(total, sizeof(double));
  return result;
}

void masked_loss_sum_into(const float* max, const float* sumexp, const float* target, const float* loss_mask,
                          float* lse, int64_t rows, double* total) {
  if (rows == 0) return;  // adds 0
  masked_loss_sum_kernel<<<1, kThreads, 0, launch_stream()>>>(max, sumexp, target, loss_mask, lse, rows, total, true);
  check_launch("masked_loss_sum_into");
}

void cross_entropy_shard_stats(const float* logits, const int32_t* targets, float* max_out, float* sumexp_out,
                               float* target_logit_out, int64_t rows, int64_t vocab_local, int64_t vocab_begin) {
  TESSERA_CHECK(vocab_local > 0, "cross_entropy_shard_stats: empty vocabulary shard");
  if (rows == 0) return;
  shard_stats_kernel<<<static_cast<unsigned>(rows), kThreads, 0, launch_stream()>>>(
      logits, targets, max_out, sumexp_out, target_logit_out, vocab_local, vocab_begin);
  check_launch("cross_entropy_shard_stats");
}

void cross_entropy_backward(float* logits, const int32_t* targets, const float* lse, const float* dloss,
                            int64_t rows, int64_t vocab_local, int64_t vocab_begin, DType round_output) {
  TESSERA_CHECK(round_output == DType::F32 || round_output == DType::BF16 || round_output == DType::F16,
                "cross_entropy_backward: ", dtype_name(round_output), " is not a floating-point compute type");
  if (rows * vocab_local == 0) return;
  backward_kernel<<<grid_for(rows * vocab_local), kThreads, 0, launch_stream()>>>(
      logits, targets, lse, dloss, rows * vocab_local, vocab_local, vocab_begin, round_output);
  check_launch("cross_entropy_backward");
}

template <typename T>
void cross_entropy_fused(T* logits, const int32_t* targets, const float* dloss, float* max_out, float* sumexp_out,
                         float* target_logit_out, float* lse_out, int64_t rows, int64_t vocab, DType round_output) {
  TESSERA_CHECK(vocab > 0, "cross_entropy_fused: empty vocabulary");
  TESSERA_CHECK(round_output == DType::F32 || round_output == DType::BF16 || round_output == DType::F16,
                "cross_entropy_fused: ", dtype_name(round_output), " is not a floating-point compute type");
  if (rows == 0) return;
  fused_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, launch_stream()>>>(
      logits, targets, dloss, max_out, sumexp_out, target_logit_out, lse_out, vocab, round_output);
  check_launch("cross_entropy_fused");
}

template void cross_entropy_fused<float>(float*, const int32_t*, const float*, float*, float*, float*, float*, int64_t,
                                         int64_t, DType);
template void cross_entropy_fused<uint16_t>(uint16_t*, const int32_t*, const float*, float*, float*, float*, float*,
                                            int64_t, int64_t, DType);

}  // namespace tessera::kernels::cuda
