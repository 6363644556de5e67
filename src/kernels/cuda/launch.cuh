// What the CUDA kernels of kernels/cuda/*.cu share (nvcc only): launch shapes, the stream, the launch
// check and a block-wide sum. The kernels run on the current device's kernel stream
// (tessera::cuda::kernel_stream, kernels/cuda/cuda_runtime.h), where the copies, cuBLASLt, cuDNN and the
// device's caching allocator's zeroing run too: one GPU per process, as Megatron.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/cuda_runtime.h"

namespace tessera::kernels::cuda {

inline constexpr int kThreads = 256;  // per block, a multiple of the warp size

// Blocks for a grid-stride loop over n elements: one element per thread up to 8192 blocks (enough to
// fill a GPU of 132 SMs many times over), then each thread takes several.
inline unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 8192));
}

// The stream every launch names (`<<<grid, block, shared, launch_stream()>>>`) and every copy or memset
// of the kernels passes: the current device's kernel stream, non-blocking.
inline cudaStream_t launch_stream() { return static_cast<cudaStream_t>(tessera::cuda::current_kernel_stream()); }

// A copy on the launch stream that the host waits for: one to or from host memory the caller reads or
// frees right after (a scalar read back, a value on its stack). `what` names it in an error.
inline void copy_and_wait(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* what) {
  const cudaStream_t s = launch_stream();
  tessera::cuda::check(cudaMemcpyAsync(dst, src, bytes, kind, s), what);
  tessera::cuda::check(cudaStreamSynchronize(s), what);
}

// A launch's configuration error (or no usable GPU) as a tessera::Error naming the kernel. Errors while
// the kernel runs surface at the next synchronising call, as CUDA reports them.
inline void check_launch(const char* kernel) { tessera::cuda::check(cudaGetLastError(), kernel); }

// The first index of this thread and the stride of a grid-stride loop, in 64 bits (tensors may hold
// more than 2^31 elements).
__device__ inline int64_t grid_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// x rounded to the nearest value of type t, as kernels::round_to does on the CPU: bf16 by the shared
// core/dtype.h functions, fp16 by the hardware's round-to-nearest-even conversion (the CPU's _Float16).
__device__ inline float round_value(DType t, float x) {
  if (t == DType::BF16) return bf16_to_fp32(fp32_to_bf16(x));
  if (t == DType::F16) return __half2float(__float2half_rn(x));
  return x;
}

// The 16-bit encoding of x (t BF16 or F16), round-to-nearest-even as kernels::encode_16bit: a value
// round_value has rounded already encodes exactly.
__device__ inline uint16_t encode_value(DType t, float x) {
  return t == DType::BF16 ? fp32_to_bf16(x) : __half_as_ushort(__float2half_rn(x));
}

// The sum of v over the block, returned to every thread, in a fixed order for a given blockDim.x (a
// multiple of 32): the same inputs give the same bits. `scratch` is __shared__ double[32].
__device__ inline double block_sum(double v, double* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // a previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace tessera::kernels::cuda
