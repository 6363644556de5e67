// The stated slice cost of --pipeline-token-slices auto prices a stage at the layers the run's pipeline
// split really gives its fullest stage (an uneven or counted split), not num_layers / pp.
#include <gtest/gtest.h>

#include <string>

#include "train/args/arguments.h"
#include "train/token_slice_cost.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

TrainArguments parse(const std::string& extra, int64_t world) {
  return parse_train_arguments(testing::split_flags(testing::kSmallRunFlags + extra), world);
}

TEST(StatedTokenSliceCost, PricesTheFullestStageOfTheRealSplit) {
  const std::string pp4 = "--num-layers 8 --pipeline-model-parallel-size 4 ";
  const TrainArguments even = parse(pp4, 4);
  EXPECT_EQ(stated_slice_cost_layers(even), 2);
  // 5 layers on the first stage, the other 3 one per stage: the first stage sets the pace.
  const TrainArguments first = parse(pp4 + "--decoder-first-pipeline-num-layers 5 ", 4);
  EXPECT_EQ(stated_slice_cost_layers(first), 5);
  const TrainArguments last = parse(pp4 + "--decoder-last-pipeline-num-layers 2 ", 4);  // 2, 2, 2, 2
  EXPECT_EQ(stated_slice_cost_layers(last), 2);
  // 6 layers + embedding + loss counted as 8 over 4 stages: 1, 2, 2, 1 (not 6 / 4).
  const TrainArguments counted = parse("--num-layers 6 --pipeline-model-parallel-size 4 "
                                       "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split ",
                                       4);
  EXPECT_EQ(stated_slice_cost_layers(counted), 2);

  // Per layer, a slice of 8 tokens with no context on hidden 32, 4 heads of 8, MLP 128, micro-batch 2:
  // 100 us + 2 x (6 x 8 x 12288 GEMM weights + 12 x 32 x 8 x 9 / 2) FLOPs at 50 GFLOP/s.
  const double per_layer = 100e-6 + 2.0 * (6.0 * 8 * 12288 + 12.0 * 32 * 36) / 50e9;
  EXPECT_NEAR(stated_token_slice_cost(even).cost(8, 0), 2 * per_layer, 1e-12);
  EXPECT_NEAR(stated_token_slice_cost(first).cost(8, 0), 5 * per_layer, 1e-12);
  // Arguments built by hand (no finalize): the split from the same flags.
  TrainArguments by_hand = first;
  by_hand.layer_split = {};
  EXPECT_EQ(stated_slice_cost_layers(by_hand), 5);
}

}  // namespace
}  // namespace tessera::train
