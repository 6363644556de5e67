// The vocab-parallel combination against a float64 cross-entropy over the whole vocabulary, with the
// shards' statistics computed by cross_entropy_shard_stats and reduced as the tensor group would.
#include "kernels/cpu/vocab_parallel_loss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/philox.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/elementwise.h"

namespace tessera::kernels {
namespace {

// The CPU implementations over host buffers (kernels/cpu/), beside the tensor entry points.
using namespace cpu;

TEST(VocabParallelLoss, ShardedStatisticsGiveTheFullCrossEntropyAndScores) {
  const int64_t rows = 5, vocab = 12;
  PhiloxStream s(3, 4);
  std::vector<float> logits(rows * vocab);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 4.0f * s.normal(i);
  logits[2 * vocab + 7] = logits[2 * vocab + 1] = 50.0f;  // a tie across shards: the first id wins
  std::vector<int32_t> labels{0, 5, 11, 6, 3};
  std::vector<float> mask{1, 0.5f, 1, 0, 1};
  for (int shards : {1, 2, 3, 4}) {
    SCOPED_TRACE(shards);
    const int64_t local = vocab / shards;
    std::vector<float> max(rows, -INFINITY), sumexp(rows, 0), target(rows, 0), best(shards * 2 * rows);
    std::vector<std::vector<float>> shard_max(shards, std::vector<float>(rows)), shard_sum = shard_max;
    for (int r = 0; r < shards; ++r) {
      std::vector<float> part(rows * local), t(rows);
      for (int64_t i = 0; i < rows; ++i)
        std::copy_n(logits.data() + i * vocab + r * local, local, part.data() + i * local);
      cross_entropy_shard_stats(part.data(), labels.data(), shard_max[r].data(), shard_sum[r].data(), t.data(), rows,
                                local, r * local);
      shard_argmax(part.data(), best.data() + r * 2 * rows, rows, local, r * local);
      for (int64_t i = 0; i < rows; ++i) {
        max[i] = std::max(max[i], shard_max[r][i]);
        target[i] += t[i];
      }
    }
    for (int r = 0; r < shards; ++r) {  // each shard rescaled to the group's max, then summed
      rescale_sum_exp(shard_sum[r].data(), shard_max[r].data(), max.data(), rows);
      for (int64_t i = 0; i < rows; ++i) sumexp[i] += shard_sum[r][i];
    }
    std::vector<float> lse(rows), scores(3 * rows);
    const double loss = masked_loss_sum(max.data(), sumexp.data(), target.data(), mask.data(), lse.data(), rows);
    pick_scores(best.data(), shards, target.data(), lse.data(), scores.data(), rows);

    double expected = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const float* row = logits.data() + i * vocab;
      double m = *std::max_element(row, row + vocab), sum = 0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - m);
      const double row_lse = m + std::log(sum);
      expected += (row_lse - row[labels[i]]) * mask[i];
      EXPECT_NEAR(lse[i], row_lse, 1e-5 * std::abs(row_lse));
      EXPECT_EQ(scores[3 * i], row[labels[i]]);
      EXPECT_EQ(scores[3 * i + 1], lse[i]);
      EXPECT_EQ(scores[3 * i + 2], static_cast<float>(std::max_element(row, row + vocab) - row));
    }
    EXPECT_NEAR(loss, expected, 1e-5 * std::abs(expected));
  }
}

TEST(Elementwise, AddScaleAndBiasRowsMatchAReference) {
  std::vector<float> a{1, 2, 3, 4, 5, 6}, b{0.5f, -1, 2, 0, 1, -3}, bias{10, 20, 30}, out(6);
  std::vector<float> sum = a;
  add_into(sum.data(), b.data(), 6);
  scale(b.data(), -2.0f, out.data(), 6);
  std::vector<float> biased = a;
  add_bias_rows(biased.data(), bias.data(), 2, 3);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(sum[i], a[i] + b[i]);
    EXPECT_EQ(out[i], -2.0f * b[i]);
    EXPECT_EQ(biased[i], a[i] + bias[i % 3]);
  }
}

}  // namespace
}  // namespace tessera::kernels
