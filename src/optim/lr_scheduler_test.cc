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

}  // namespace
}  // namespace tessera::optim
