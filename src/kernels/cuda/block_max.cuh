// A block-wide float max taken on integers, shared by the cross-entropy's and the distillation loss's row
// statistics: the same max whatever the order the threads see the row in.
#pragma once

#include <cstdint>

namespace tessera::kernels::cuda {

// Float bits mapped to int32 so that integer order is float order (its own inverse), as on the CPU.
__device__ inline int32_t ordered_bits(int32_t b) { return b ^ ((b >> 31) & 0x7fffffff); }

// The max of v over the block, returned to every thread. `scratch` is __shared__ int32_t[32]; the block is
// whole warps.
__device__ inline int32_t block_max(int32_t v, int32_t* scratch) {
  v = __reduce_max_sync(0xffffffffu, v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : INT32_MIN;
  return __reduce_max_sync(0xffffffffu, v);
}

}  // namespace tessera::kernels::cuda
