// The CUDA scoring half of the vocab-parallel loss (kernels/cuda/vocab_parallel_scores.cu) through the
// tensor entry points, on tensors on cuda:0, against the CPU bit for bit (both pick, neither computes):
// each shard's argmax over odd widths, with ties (the first wins), infinities and NaNs (skipped, but a
// row's first logit keeps a NaN as the CPU's scan does), and the pick over shards. Skipped, with CUDA's
// reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "core/tensor.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/vocab_parallel_loss.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using CudaVocabParallelScores = CudaKernelTest;

// A row's argmax on the GPU and the CPU, compared bit for bit.
::testing::AssertionResult argmax_matches(const Tensor& logits, int64_t vocab_begin) {
  Tensor best = Tensor::zeros({2 * logits.dim(0)}), best_gpu = to_device(best);
  kernels::shard_argmax(to_device(logits), best_gpu, vocab_begin);
  kernels::shard_argmax(logits, best, vocab_begin);
  return same_bits(to_host(best_gpu), best);
}

TEST_F(CudaVocabParallelScores, ShardArgmaxMatchesTheCpu) {
  for (auto [rows, vocab] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {17, 255}, {5, 257}, {9, 1031}, {2, 50257}}) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << vocab);
    EXPECT_TRUE(argmax_matches(random({rows, vocab}, 1), 0));
    EXPECT_TRUE(argmax_matches(random({rows, vocab}, 2), 12345));
  }
}

TEST_F(CudaVocabParallelScores, ShardArgmaxTiesInfinitiesAndNans) {
  const int64_t rows = 8, vocab = 1000;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  Tensor logits = random({rows, vocab}, 3);
  float* x = logits.f32();
  // Row 0: a tie far apart (the first wins); row 1: ties within one thread's stride and across threads.
  x[0 * vocab + 900] = x[0 * vocab + 17] = 5.0f;
  x[1 * vocab + 3] = x[1 * vocab + 259] = x[1 * vocab + 4] = 7.0f;
  // Row 2: +inf twice; row 3: all -inf (column 0 wins).
  x[2 * vocab + 600] = x[2 * vocab + 400] = inf;
  for (int64_t v = 0; v < vocab; ++v) x[3 * vocab + v] = -inf;
  // Row 4: NaNs around the max (skipped); row 5: a NaN first (the row's answer); row 6: all NaN.
  x[4 * vocab + 10] = x[4 * vocab + 999] = nan;
  x[4 * vocab + 11] = 9.0f;
  x[5 * vocab + 0] = nan;
  x[5 * vocab + 500] = 9.0f;
  for (int64_t v = 0; v < vocab; ++v) x[6 * vocab + v] = nan;
  // Row 7: -0 and +0 as the max, -0 first (equal: the first wins).
  for (int64_t v = 0; v < vocab; ++v) x[7 * vocab + v] = -1.0f;
  x[7 * vocab + 300] = -0.0f;
  x[7 * vocab + 301] = 0.0f;
  EXPECT_TRUE(argmax_matches(logits, 7));
}

TEST_F(CudaVocabParallelScores, PickScoresMatchesTheCpu) {
  for (auto [shards, rows] : {std::pair<int64_t, int64_t>{1, 1}, {2, 7}, {3, 300}, {8, 1025}}) {
    SCOPED_TRACE(::testing::Message() << shards << " shards, " << rows << " rows");
    Tensor best = random({shards, 2 * rows}, 4);
    // Ties between shards on every third row: the first shard wins. Ids distinct per shard.
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t s = 0; s < shards; ++s) {
        if (r % 3 == 0) best.f32()[s * 2 * rows + 2 * r] = 0.5f;
        best.f32()[s * 2 * rows + 2 * r + 1] = static_cast<float>(s * 1000 + r);
      }
    const Tensor target = random({rows}, 5), lse = random({rows}, 6);
    Tensor out = Tensor::zeros({3 * rows}), out_gpu = to_device(out);
    kernels::pick_scores(to_device(best), to_device(target), to_device(lse), out_gpu);
    kernels::pick_scores(best, target, lse, out);
    EXPECT_TRUE(same_bits(to_host(out_gpu), out));
  }
}

}  // namespace
}  // namespace tessera::cuda
