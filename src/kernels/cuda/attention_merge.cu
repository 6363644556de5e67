// Merging a block's partial attention into the running one on the GPU (kernels/cuda/attention_merge.h).
// One thread per row (s, b, h): the row's two log-sum-exps give the weights, then its head_dim outputs are
// rescaled and summed. The thread that reads a row's lse is the one that rewrites it, so there is no race.
#include <cuda_runtime.h>
#include <math.h>

#include "kernels/cuda/attention_merge.h"
#include "kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {
namespace {

__global__ void merge_kernel(float* out, float* lse, const float* part_out, const float* part_lse, int64_t seq,
                             int64_t batch, int64_t heads, int64_t head_dim) {
  const int64_t rows = seq * batch * heads;
  for (int64_t row = grid_index(); row < rows; row += grid_stride()) {
    // row = (s * batch + b) * heads + h, the output's order; lse is [batch, heads, seq].
    const int64_t h = row % heads, b = row / heads % batch, s = row / (heads * batch);
    const int64_t stat = (b * heads + h) * seq + s;
    const float a = lse[stat], p = part_lse[stat];
    const float m = fmaxf(a, p);
    if (m == -INFINITY) continue;  // neither block has a visible key for this row
    // Each weight against the merged lse, as the CPU, so the two sum to 1 to rounding.
    const float merged = m + logf(expf(a - m) + expf(p - m));
    const float wa = expf(a - merged), wp = expf(p - merged);
    float* o = out + row * head_dim;
    const float* po = part_out + row * head_dim;
    for (int64_t x = 0; x < head_dim; ++x) o[x] = wa * o[x] + wp * po[x];
    lse[stat] = merged;
  }
}

}  // namespace

void attention_merge_into(float* out, float* lse, const float* part_out, const float* part_lse, int64_t seq,
                          int64_t batch, int64_t heads, int64_t head_dim) {
  const int64_t rows = seq * batch * heads;
  if (rows == 0) return;
  merge_kernel<<<grid_for(rows), kThreads, 0, launch_stream()>>>(out, lse, part_out, part_lse, seq, batch, heads,
                                                                 head_dim);
  check_launch("attention_merge_into");
}

}  // namespace tessera::kernels::cuda
