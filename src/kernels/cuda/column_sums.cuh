// The launch shape of kernels/math/column_sums.h's step 1 on the GPU (nvcc only): blocks of kThreads
// columns by chunks of rows. gridDim.y is at most 65535: beyond that many chunks, each block row takes
// several (a kernel loops k from blockIdx.y by gridDim.y).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/math/column_sums.h"

namespace tessera::kernels::cuda {

inline dim3 column_partials_grid(int64_t rows, int64_t cols) {
  return dim3(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
              static_cast<unsigned>(std::clamp<int64_t>(math::column_sum_chunks(rows), 1, 65535)));
}

}  // namespace tessera::kernels::cuda
