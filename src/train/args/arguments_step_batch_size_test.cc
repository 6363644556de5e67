// Megatron's --step-batch-size-schedule through the argument parser: its syntax (tokens, suffixes,
// commas, any order), the rules it is refused by (flag, value, rule), and how it combines with
// --global-batch-size, --rampup-batch-size, --train-iters and the data-parallel size.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/check.h"
#include "train/args/arguments.h"
#include "train/step_batch_size_schedule.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

// A small run at --seq-length 16 and --micro-batch-size 2, the schedule as one argument (Megatron's str).
std::vector<std::string> flags(const std::string& schedule, const std::string& extra = "--train-samples 64") {
  std::vector<std::string> f = testing::split_flags(
      "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data --tokenizer-type "
      "NullTokenizer --vocab-size 40 --micro-batch-size 2 --lr 1e-3 " + extra);
  f.push_back("--step-batch-size-schedule");
  f.push_back(schedule);
  return f;
}

std::string error_of(const std::vector<std::string>& f, int64_t world = 1) {
  try {
    parse_train_arguments(f, world);
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

std::vector<std::pair<int64_t, int64_t>> pairs(const std::vector<BatchSizeStep>& steps) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const BatchSizeStep& s : steps) out.push_back({s.threshold, s.size});
  return out;
}

// Megatron's _parse_schedule by hand: "2.4B" tokens is 2,400,000,000 // 2048 = 1,171,875 samples; "1k"
// is 1000 // 2048 = 0; entries are sorted, commas are spaces, "1.5K" sizes truncate as int(float).
TEST(StepBatchSizeSchedule, ParsesMegatronsSyntax) {
  EXPECT_EQ(pairs(parse_step_batch_size_schedule("0:16 2.4B:320 4.8B:624", 2048)),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 16}, {1171875, 320}, {2343750, 624}}));
  EXPECT_EQ(pairs(parse_step_batch_size_schedule(" 4.8b:1.5K,0:16  1M:32 ", 2048)),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 16}, {488, 32}, {2343750, 1500}}));
  EXPECT_EQ(pairs(parse_step_batch_size_schedule("1k:8 0:4", 16)),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {62, 8}}));
  EXPECT_EQ(pairs(parse_step_batch_size_schedule("0:8", 16)), (std::vector<std::pair<int64_t, int64_t>>{{0, 8}}));
}

TEST(StepBatchSizeSchedule, RefusesWithTheRule) {
  const auto error = [](const std::string& s) {
    try {
      parse_step_batch_size_schedule(s, 16);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error("0:4 64"), "--step-batch-size-schedule=0:4 64: entry \"64\" is not THRESHOLD:BATCH_SIZE");
  EXPECT_NE(error("0:4 64:x").find("entry \"64:x\": \"x\" is not a number"), std::string::npos);
  EXPECT_NE(error("0:4 64:0x10").find("is not a number"), std::string::npos);
  EXPECT_NE(error("0:4 inf:8").find("is not a number"), std::string::npos);
  EXPECT_EQ(error(" , "), "--step-batch-size-schedule= , : the schedule has no entries; give THRESHOLD:BATCH_SIZE "
                          "pairs, the first at 0");
  EXPECT_EQ(error("16:4 32:8"), "--step-batch-size-schedule=16:4 32:8: the first entry (in threshold order) must have "
                                "threshold 0, got 1 samples (thresholds are tokens, divided by --seq-length=16)");
  // 0 and 15 tokens are both sample 0 at --seq-length 16.
  EXPECT_NE(error("0:4 15:8").find("thresholds must be strictly increasing, got 0 samples twice"), std::string::npos);
  EXPECT_NE(error("0:4 32:4 32:8").find("strictly increasing"), std::string::npos);
  EXPECT_NE(error("0:4 32:0").find("batch sizes must be positive, got 0"), std::string::npos);
  EXPECT_NE(error("0:4 32:-8").find("batch sizes must be positive, got -8"), std::string::npos);
}

TEST(StepBatchSizeSchedule, SetsTheRunsScheduleAndIterations) {
  // Thresholds 0, 8 and 24 samples (128 and 384 tokens at --seq-length 16): 4 4 (8) 8 8 (24) 16 16 (56)
  // 16 (72 >= 64): Megatron's loop runs while fewer than --train-samples are consumed.
  const TrainArguments a = parse_train_arguments(flags("0:4 128:8 384:16"), 1);
  EXPECT_EQ(a.global_batch_size, 16);  // the last entry's
  EXPECT_EQ(a.num_micro_batches, 8);
  EXPECT_EQ(a.train_iters, 7);
  EXPECT_EQ(a.batch_schedule.at(7), 4);
  EXPECT_EQ(a.batch_schedule.at(8), 8);
  EXPECT_EQ(a.batch_schedule.samples_for(7), 72);
}

TEST(StepBatchSizeSchedule, CombinesAsMegatron) {
  EXPECT_EQ(error_of(flags("0:4 128:8", "--train-samples 64 --global-batch-size 8")),
            "--global-batch-size=8: cannot be combined with --step-batch-size-schedule (its last entry is the final "
            "global batch)");
  EXPECT_NE(error_of(flags("0:4 128:8", "--train-samples 64 --rampup-batch-size 2 2 8"))
                .find("--rampup-batch-size=2 2 8: cannot be combined with --step-batch-size-schedule"),
            std::string::npos);
  EXPECT_NE(error_of(flags("0:4 128:8", "--train-iters 4"))
                .find("--step-batch-size-schedule=0:4 128:8: needs --train-samples"),
            std::string::npos);
  // Every entry the run uses divides by micro batch x data-parallel size (2 x 2 here): 6 does not.
  EXPECT_EQ(error_of(flags("0:4 128:6 384:8"), 2),
            "--step-batch-size-schedule=0:4 128:6 384:8: gives a global batch of 6 after 8 consumed samples, which "
            "must be divisible by --micro-batch-size=2 x data-parallel size=2");
  // An entry that no iteration uses is not checked, as Megatron checks each when it applies it: after 0 and 4
  // samples, the next iteration starts at 8, past the 6 of 96 tokens (its range is [6, 7)).
  EXPECT_EQ(error_of(flags("0:4 96:6 112:8"), 2), "accepted");
}

}  // namespace
}  // namespace tessera::train
