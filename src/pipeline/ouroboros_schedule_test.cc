// Ouroboros' rule as data: each module's staleness, every mini-batch applied once per module, the error
// gradient of each backward produced by the module above for the same mini-batch, the placement.
#include "pipeline/ouroboros_schedule.h"

#include <gtest/gtest.h>

#include <map>

#include "core/check.h"

namespace tessera::pipeline {
namespace {

TEST(OuroborosSchedule, ModuleKIsKMinusOneMinusKIterationsLateAfterTheWarmUp) {
  const OuroborosShape s{4, 2};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(ouroboros_delay(s, k, 0), 0);
    EXPECT_EQ(ouroboros_delay(s, k, 1), 0);
    EXPECT_EQ(ouroboros_delay(s, k, 2), 3 - k);
    EXPECT_EQ(ouroboros_delay(s, k, 9), 3 - k);
    EXPECT_EQ(ouroboros_weight_versions(s, k), 3 - k);
  }
  // After the warm-up the first module waits for mini-batch N = 2 to reach it: iterations 2..4 have none.
  EXPECT_EQ(ouroboros_backward_batch(s, 0, 1), 1);
  EXPECT_EQ(ouroboros_backward_batch(s, 0, 2), -1);
  EXPECT_EQ(ouroboros_backward_batch(s, 0, 4), -1);
  EXPECT_EQ(ouroboros_backward_batch(s, 0, 5), 2);
  EXPECT_EQ(ouroboros_backward_batch(s, 3, 2), 2);  // the last module is never late
  EXPECT_EQ(ouroboros_backward_batch(s, 2, 3), 2);
}

TEST(OuroborosSchedule, EveryMiniBatchIsAppliedOncePerModuleWithItsOwnWeights) {
  for (int K : {1, 2, 3, 4})
    for (int64_t N : {0, 1, 3}) {
      SCOPED_TRACE(str_cat("K=", K, " N=", N));
      const OuroborosShape s{K, N};
      const int64_t T = 12;
      std::map<std::pair<int, int64_t>, int> applied;  // (module, mini-batch) -> times
      for (int64_t t = 0; t < T; ++t)
        for (const OuroborosStep& st : ouroboros_iteration(s, t)) {
          EXPECT_EQ(st.forward_batch, t);
          if (st.backward_batch < 0) continue;
          EXPECT_LE(st.backward_batch, t);
          EXPECT_EQ(st.weight_version, st.backward_batch);  // the rule's w^{t-K+k}
          ++applied[{st.module, st.backward_batch}];
        }
      for (int k = 0; k < K; ++k)
        for (int64_t b = 0; b + (K - 1 - k) < T; ++b) EXPECT_EQ((applied[{k, b}]), 1) << "module " << k << " batch " << b;
    }
}

TEST(OuroborosSchedule, EachBackwardUsesTheErrorGradientOfTheModuleAboveForTheSameMiniBatch) {
  const OuroborosShape s{4, 3};
  for (int64_t t = 0; t < 12; ++t)
    for (const OuroborosStep& st : ouroboros_iteration(s, t)) {
      if (st.backward_batch < 0 || st.module == 3) {
        EXPECT_EQ(st.output_grad_from_iteration, -1);
        continue;
      }
      const int64_t from = st.output_grad_from_iteration;
      ASSERT_GE(from, 0);
      const OuroborosStep above = ouroboros_iteration(s, from)[st.module + 1];
      EXPECT_EQ(above.backward_batch, st.backward_batch) << "module " << st.module << " at " << t;
      // A record is kept past its iteration exactly when its backward comes later.
      EXPECT_EQ(ouroboros_keeps_record(s, st.module, st.backward_batch), st.backward_batch < t);
    }
}

TEST(OuroborosSchedule, FirstAndLastModuleShareRankZero) {
  const OuroborosShape s{4, 0};
  EXPECT_EQ(ouroboros_rank_of_module(s, 0), 0);
  EXPECT_EQ(ouroboros_rank_of_module(s, 1), 1);
  EXPECT_EQ(ouroboros_rank_of_module(s, 2), 2);
  EXPECT_EQ(ouroboros_rank_of_module(s, 3), 0);
  EXPECT_THROW(validate_ouroboros({0, 0}), Error);
  EXPECT_THROW(validate_ouroboros({2, -1}), Error);
}

}  // namespace
}  // namespace tessera::pipeline
