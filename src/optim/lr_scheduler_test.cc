#include "optim/lr_scheduler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/check.h"

namespace tessera::optim {
namespace {

TEST(LrSchedule, WarmupThenDecayAsMegatron) {
  LrSchedule s{1e-3f, 1e-4f, 10, 110, LrDecayStyle::Cosine};
  EXPECT_FLOAT_EQ(s.lr(0), 0.0f);
  EXPECT_FLOAT_EQ(s.lr(5), 5e-4f);
  EXPECT_FLOAT_EQ(s.lr(10), 1e-3f);
  EXPECT_NEAR(s.lr(60), 1e-4 + 0.5 * (1e-3 - 1e-4), 1e-9);  // half way: cos(pi/2) = 0
  EXPECT_FLOAT_EQ(s.lr(110), 1e-4f);
  EXPECT_FLOAT_EQ(s.lr(500), 1e-4f);
  s.style = LrDecayStyle::Linear;
  EXPECT_NEAR(s.lr(35), 1e-4 + 0.75 * (1e-3 - 1e-4), 1e-9);
  s.style = LrDecayStyle::Constant;
  EXPECT_FLOAT_EQ(s.lr(100), 1e-3f);
  EXPECT_THROW(parse_lr_decay_style("exponential"), Error);
}

// --lr-warmup-init: the warm-up is a line from it to the peak.
TEST(LrSchedule, WarmupStartsAtTheInitialRate) {
  LrSchedule s{1e-3f, 1e-4f, 10, 110, LrDecayStyle::Linear};
  s.init_lr = 2e-4f;
  EXPECT_FLOAT_EQ(s.lr(0), 2e-4f);
  EXPECT_FLOAT_EQ(s.lr(5), 6e-4f);
  EXPECT_FLOAT_EQ(s.lr(10), 1e-3f);
  EXPECT_NEAR(s.lr(60), 1e-4 + 0.5 * (1e-3 - 1e-4), 1e-9);  // the decay does not see it
}

// Megatron's get_wd: linear or cosine from start to end over incr_steps, then end; constant is end.
TEST(WeightDecaySchedule, IncreasesAsMegatron) {
  WeightDecaySchedule s{0.0f, 0.1f, 40, LrDecayStyle::Linear};
  EXPECT_TRUE(s.varies());
  EXPECT_FLOAT_EQ(s.wd(0), 0.0f);
  EXPECT_FLOAT_EQ(s.wd(10), 0.025f);
  EXPECT_FLOAT_EQ(s.wd(40), 0.1f);
  EXPECT_FLOAT_EQ(s.wd(100), 0.1f);
  s.style = LrDecayStyle::Cosine;  // 0.5 (cos(pi (1 - r)) + 1): slow, then fast, then slow
  EXPECT_FLOAT_EQ(s.wd(0), 0.0f);
  EXPECT_NEAR(s.wd(10), 0.1 * 0.5 * (std::cos(M_PI * 0.75) + 1), 1e-9);
  EXPECT_NEAR(s.wd(20), 0.05, 1e-9);
  EXPECT_FLOAT_EQ(s.wd(40), 0.1f);
  s.style = LrDecayStyle::Constant;
  EXPECT_FALSE(s.varies());
  EXPECT_FLOAT_EQ(s.wd(0), 0.1f);
}

}  // namespace
}  // namespace tessera::optim
