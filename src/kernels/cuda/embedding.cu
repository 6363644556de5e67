// Token and position embedding on the GPU (kernels/cuda/embedding.h), the CPU's arithmetic
// (kernels/cpu/embedding.cc) element for element. The backward's scatter-add cannot split rows between
// threads without atomics (whose order varies); each thread owns a column instead and adds the rows
// into it in row order. Only `hidden` threads: correct and deterministic first, faster later.
#include <cuda_runtime.h>

#include "core/check.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

__global__ void embedding_forward_kernel(const int32_t* tokens, const int32_t* positions, const float* wte,
                                         const float* wpe, float* out, int64_t n, int64_t hidden,
                                         int64_t vocab_begin, int64_t vocab_end) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const int64_t t = i / hidden, c = i % hidden, id = tokens[t];
    // An id owned by another vocab shard contributes zero here; the shards' outputs are summed later.
    float v = id >= vocab_begin && id < vocab_end ? wte[(id - vocab_begin) * hidden + c] : 0.0f;
    if (wpe) v += wpe[static_cast<int64_t>(positions[t]) * hidden + c];
    out[i] = v;
  }
}

__global__ void embedding_backward_kernel(const int32_t* tokens, const int32_t* positions, const float* dout,
                                          float* dwte, float* dwpe, int64_t rows, int64_t hidden,
                                          int64_t vocab_begin, int64_t vocab_end) {
  const int64_t c = grid_index();
  if (c >= hidden) return;
  for (int64_t t = 0; t < rows; ++t) {
    const float d = dout[t * hidden + c];
    const int64_t id = tokens[t];
    if (id >= vocab_begin && id < vocab_end) dwte[(id - vocab_begin) * hidden + c] += d;
    if (dwpe) dwpe[static_cast<int64_t>(positions[t]) * hidden + c] += d;
  }
}

}  // namespace

void embedding_forward(const int32_t* tokens, const int32_t* positions, const float* wte, const float* wpe,
                       float* out, int64_t rows, int64_t hidden, int64_t vocab_begin, int64_t vocab_end) {
  TESSERA_CHECK(wpe == nullptr || positions != nullptr, "embedding_forward: wpe given without positions");
  if (rows * hidden == 0) return;
  embedding_forward_kernel<<<grid_for(rows * hidden), kThreads, 0, launch_stream()>>>(
      tokens, positions, wte, wpe, out, rows * hidden, hidden, vocab_begin, vocab_end);
  check_launch("embedding_forward");
}

void embedding_backward(const int32_t* tokens, const int32_t* positions, const float* dout, float* dwte,
                        float* dwpe, int64_t rows, int64_t hidden, int64_t vocab_begin, int64_t vocab_end) {
  TESSERA_CHECK(dwpe == nullptr || positions != nullptr, "embedding_backward: dwpe given without positions");
  if (rows * hidden == 0) return;
  embedding_backward_kernel<<<static_cast<unsigned>((hidden + kThreads - 1) / kThreads), kThreads, 0,
                              launch_stream()>>>(tokens, positions, dout, dwte, dwpe, rows, hidden, vocab_begin,
                                                 vocab_end);
  check_launch("embedding_backward");
}

}  // namespace tessera::kernels::cuda
