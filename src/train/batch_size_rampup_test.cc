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

// Megatron's examples/gpt3/train_gpt3_175b_distributed.sh: --step-batch-size-schedule "0:16 2.4B:320 4.8B:624
// 7.2B:928 9.6B:1232 12B:1536" at --seq-length 2048, --train-samples 146484375. By hand: thresholds are
// 1171875 k samples (k = 0..5); each size runs ceil(what is left of its range / size) iterations:
// 73243 of 16 (to 1171888), 3663 of 320 (2344048), 1878 of 624 (3515920), 1263 of 928 (4687984), 951 of
// 1232 (5859616), then ceil(140624759 / 1536) = 91553 of 1536: 172551 iterations, 146485024 samples.
TEST(GlobalBatchSchedule, Gpt3StepSchedule) {
  const GlobalBatchSchedule s(parse_step_batch_size_schedule("0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536", 2048));
  EXPECT_TRUE(s.ramps());
  EXPECT_EQ(s.final_size(), 1536);
  EXPECT_EQ(s.at(1171874), 16);
  EXPECT_EQ(s.at(1171875), 320);
  EXPECT_EQ(s.at(5859375), 1536);
  EXPECT_EQ(s.iterations_for(146484375), 172551);
  EXPECT_EQ(s.samples_for(172551), 146485024);
  EXPECT_EQ(s.samples_for(73243), 1171888);
  EXPECT_EQ(s.samples_for(73243 + 3663), 2344048);
  const std::vector<BatchSizeStep> used = s.steps_used(172551);
  ASSERT_EQ(used.size(), 6u);
  EXPECT_EQ(used[1].threshold, 1171888);  // the samples consumed when 320 is first used
  EXPECT_EQ(used[5].size, 1536);
}

// A schedule may shrink, and an entry whose range an iteration jumps over is never used. Thresholds 0, 4,
// 10 and 12 samples ("0:2 64:4 160:8 200:4" at --seq-length 16): consumed 0 -> 2, 2 -> 2, 4 -> 4, 8 -> 4,
// 12 -> 4 ...; the 8 of [10, 12) is skipped. A single entry counts iterations as Megatron's loop: a partial
// last batch is one more iteration (ceil), unlike a ramp's or a constant batch's floor.
TEST(GlobalBatchSchedule, StepScheduleShrinksAndSkips) {
  const GlobalBatchSchedule s(parse_step_batch_size_schedule("0:2 64:4 160:8 200:4", 16));
  EXPECT_EQ(run_sizes(s, 6), (std::vector<int64_t>{2, 2, 4, 4, 4, 4}));
  EXPECT_EQ(s.iterations_for(30), 9);  // 2 + 2 + 7 x 4 = 32 >= 30
  EXPECT_EQ(s.iterations_for(32), 9);
  EXPECT_EQ(s.iterations_for(33), 10);
  const std::vector<BatchSizeStep> used = s.steps_used(9);
  ASSERT_EQ(used.size(), 3u);
  EXPECT_EQ(used[1].threshold, 4);
  EXPECT_EQ(used[1].size, 4);
  EXPECT_EQ(used[2].threshold, 12);
  const GlobalBatchSchedule one(parse_step_batch_size_schedule("0:8", 16));
  EXPECT_FALSE(one.ramps());
  EXPECT_EQ(one.iterations_for(30), 4);
  EXPECT_EQ(one.samples_for(4), 32);
}

}  // namespace
}  // namespace tessera::train
