// Scoring over vocabulary shards on the GPU (kernels/cuda/vocab_parallel_loss.h). shard_argmax: one
// block per row, each thread the best of its strided columns, then a tree over the block's candidates.
// The CPU scans a row keeping the first strictly larger logit, so a NaN never replaces the best but
// stays the answer when it is the first logit; here NaNs are left out of the tree (a candidate that
// compares false both ways would make the result depend on the tree's shape) and the first logit's
// NaN is applied at the end, and ties go to the smaller index: the CPU's answer in any order.
// pick_scores: one thread per row, the CPU's loop over the shards.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/vocab_parallel_loss.h"
#include "kernels/math/vocab_scores.h"

namespace tessera::kernels::cuda {
namespace {

// A column's logit and index; index -1: no candidate (every column seen was NaN, or none was seen).
struct Candidate {
  float value;
  int64_t index;
};

// Whether b should replace a: a larger value, or an equal one further left.
__device__ inline bool better(Candidate b, Candidate a) {
  if (b.index < 0) return false;
  if (a.index < 0) return true;
  return b.value > a.value || (b.value == a.value && b.index < a.index);
}

__global__ void shard_argmax_kernel(const float* logits, float* best, int64_t vocab_local, int64_t vocab_begin) {
  __shared__ float values[kThreads];
  __shared__ int64_t indices[kThreads];
  const int64_t r = blockIdx.x;
  const float* x = logits + r * vocab_local;
  Candidate c{0.0f, -1};
  for (int64_t v = threadIdx.x; v < vocab_local; v += blockDim.x)
    if (!isnan(x[v]) && better(Candidate{x[v], v}, c)) c = Candidate{x[v], v};
  values[threadIdx.x] = c.value;
  indices[threadIdx.x] = c.index;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const Candidate a{values[threadIdx.x], indices[threadIdx.x]};
      const Candidate b{values[threadIdx.x + half], indices[threadIdx.x + half]};
      if (better(b, a)) {
        values[threadIdx.x] = b.value;
        indices[threadIdx.x] = b.index;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    // The CPU starts from column 0: a NaN there is never replaced; an all-NaN row keeps column 0 too.
    const int64_t arg = isnan(x[0]) || indices[0] < 0 ? 0 : indices[0];
    best[2 * r] = x[arg];
    best[2 * r + 1] = static_cast<float>(vocab_begin + arg);
  }
}

__global__ void pick_scores_kernel(const float* best, int64_t shards, const float* target, const float* lse,
                                   float* out, int64_t rows) {
  for (int64_t r = grid_index(); r < rows; r += grid_stride()) math::pick_score_row(best, shards, target, lse, out, rows, r);
}

}  // namespace

void shard_argmax(const float* logits, float* best, int64_t rows, int64_t vocab_local, int64_t vocab_begin) {
  TESSERA_CHECK(vocab_local > 0, "shard_argmax: empty vocabulary shard");
  if (rows == 0) return;
  // The tree halves the block: kThreads is a power of two.
  static_assert((kThreads & (kThreads - 1)) == 0);
  shard_argmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, launch_stream()>>>(logits, best, vocab_local,
                                                                                     vocab_begin);
  check_launch("shard_argmax");
}

void pick_scores(const float* best, int64_t shards, const float* target, const float* lse, float* out, int64_t rows) {
  TESSERA_CHECK(shards > 0, "pick_scores: no shards");
  if (rows == 0) return;
  pick_scores_kernel<<<grid_for(rows), kThreads, 0, launch_stream()>>>(best, shards, target, lse, out, rows);
  check_launch("pick_scores");
}

}  // namespace tessera::kernels::cuda
