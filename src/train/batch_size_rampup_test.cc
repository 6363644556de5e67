#include "train/batch_size_rampup.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera::train {
namespace {

// The sizes the iterations of a run take, consuming the samples one global batch at a time.
std::vector<int64_t> run_sizes(const GlobalBatchSchedule& s, int64_t iterations) {
  std::vector<int64_t> sizes;
  int64_t consumed = 0;
  for (int64_t i = 0; i < iterations; ++i) {
    sizes.push_back(s.at(consumed));
    consumed += sizes.back();
  }
  return sizes;
}

// --global-batch-size 8 --rampup-batch-size 2 2 12: 3 increments, one every 12 / 3 = 4 samples. By hand:
// consumed 0 -> 2, 2 -> 2 (2 / 4 = 0.5 increments), 4 -> 4, 8 -> 6, 14 (past 12) -> 8.
TEST(GlobalBatchSchedule, RampsAsMegatronsCalculator) {
  const GlobalBatchSchedule s(8, BatchSizeRampup{2, 2, 12});
  EXPECT_TRUE(s.ramps());
  EXPECT_EQ(run_sizes(s, 7), (std::vector<int64_t>{2, 2, 4, 6, 8, 8, 8}));
  EXPECT_EQ(s.at(3), 2);
  EXPECT_EQ(s.at(11), 6);
  EXPECT_EQ(s.at(12), 8);  // at the ramp's end: its last increment (12 / 4 = 3)
  EXPECT_EQ(s.sizes(), (std::vector<int64_t>{2, 4, 6, 8}));
}

// Megatron's update_train_iters: the ramp's iterations while the consumed samples are at most the ramp's
// (so the one that crosses its end too), then whole final batches; a partial last batch is dropped.
TEST(GlobalBatchSchedule, CountsIterationsAsMegatron) {
  const GlobalBatchSchedule s(8, BatchSizeRampup{2, 2, 12});
  EXPECT_EQ(s.iterations_for(14), 4);  // 2 + 2 + 4 + 6
  EXPECT_EQ(s.iterations_for(21), 4);  // the 7 samples after 14 are less than a batch of 8
  EXPECT_EQ(s.iterations_for(30), 6);  // 14 + 8 + 8
  EXPECT_EQ(s.samples_for(6), 30);
  EXPECT_EQ(s.samples_for(3), 8);
  EXPECT_EQ(s.samples_for(0), 0);
  for (int64_t samples : {14, 22, 30, 31, 100}) EXPECT_LE(s.samples_for(s.iterations_for(samples)), samples) << samples;
}

TEST(GlobalBatchSchedule, WithoutARampEveryIterationTakesTheGlobalBatch) {
  for (const GlobalBatchSchedule& s : {GlobalBatchSchedule(8, std::nullopt), GlobalBatchSchedule(8, BatchSizeRampup{8, 4, 100})}) {
    EXPECT_FALSE(s.ramps());
    EXPECT_EQ(s.at(0), 8);
    EXPECT_EQ(s.at(50), 8);
    EXPECT_EQ(s.iterations_for(30), 3);
    EXPECT_EQ(s.samples_for(3), 24);
    EXPECT_EQ(s.sizes(), (std::vector<int64_t>{8}));
  }
}

// GPT-3 175B's schedule (Megatron's examples: --global-batch-size 1536 --rampup-batch-size 16 16 5859375):
// 95 increments, one every 61,677.63 samples.
TEST(GlobalBatchSchedule, Gpt3Ramp) {
  const GlobalBatchSchedule s(1536, BatchSizeRampup{16, 16, 5859375});
  EXPECT_EQ(s.at(0), 16);
  EXPECT_EQ(s.at(61677), 16);
  EXPECT_EQ(s.at(61678), 32);
  EXPECT_EQ(s.at(5859375 - 61678), 1504);  // 93.99 increments
  EXPECT_EQ(s.at(5859375), 1536);          // the ramp's last sample: 95 increments
  EXPECT_EQ(s.at(5859376), 1536);
  EXPECT_EQ(s.sizes().size(), 96u);
  const std::vector<int64_t> sizes = run_sizes(s, 20000);
  for (size_t i = 1; i < sizes.size(); ++i) {
    EXPECT_GE(sizes[i], sizes[i - 1]);
    EXPECT_LE(sizes[i] - sizes[i - 1], 16);
  }
  EXPECT_EQ(sizes.back(), 1536);
}

}  // namespace
}  // namespace tessera::train
