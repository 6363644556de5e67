// TeraPipe's slicing (pipeline/token_slicing_search.h): the latency formula by hand, and the dynamic program
// against a brute force over every slicing of a short sequence (all 2^7 compositions of 8 units) under
// several cost shapes, stage counts and micro-batch counts. (Moved from plan/, where the planner's time
// model prices the slices: plan/token_slicing_price_test.cc.)
#include "pipeline/token_slicing_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/check.h"
#include "core/philox.h"

namespace tessera::pipeline {
namespace {

TEST(TokenPipelineLatency, IsTheSumTimesMicroBatchesPlusTheStagesTimesTheLargest) {
  const SliceCost t = [](int64_t l, int64_t c) { return static_cast<double>(l + c); };
  // Slices 2, 3, 1: times 2, 5 (3 after 2), 6 (1 after 5).
  EXPECT_DOUBLE_EQ(token_pipeline_latency({2, 3, 1}, t, 1, 1), 13);
  EXPECT_DOUBLE_EQ(token_pipeline_latency({2, 3, 1}, t, 3, 4), 3 * 13 + 3 * 6);
  EXPECT_DOUBLE_EQ(token_pipeline_latency({6}, t, 2, 5), (2 + 4) * 6);  // unsliced: GPipe's (m + K - 1) t
  // Whole-sequence work on the last stage (multi-token prediction after the last slice): once per
  // micro-batch on that stage's path, sliced or not; the fill and drain stay the slices'.
  EXPECT_DOUBLE_EQ(token_pipeline_latency({2, 3, 1}, t, 3, 4, 10), 3 * (13 + 10) + 3 * 6);
  EXPECT_DOUBLE_EQ(token_pipeline_latency({6}, t, 2, 5, 10), 2 * (6 + 10) + 4 * 6);
}

// The least latency over every composition of `units` units, by enumeration.
double brute_force(int64_t units, int64_t unit, const SliceCost& t, int64_t m, int stages) {
  double best = INFINITY;
  for (uint32_t cuts = 0; cuts < (1u << (units - 1)); ++cuts) {  // bit i: a cut after unit i + 1
    std::vector<int64_t> slices;
    int64_t start = 0;
    for (int64_t i = 1; i <= units; ++i)
      if (i == units || (cuts >> (i - 1) & 1)) {
        slices.push_back((i - start) * unit);
        start = i;
      }
    best = std::min(best, token_pipeline_latency(slices, t, m, stages));
  }
  return best;
}

TEST(BestTokenSlicing, EqualsTheBruteForceOptimum) {
  constexpr int64_t kUnit = 8, kLength = 64;
  PhiloxStream noise(5, 5);
  const std::vector<std::pair<std::string, SliceCost>> costs = {
      // A fixed overhead per slice, work per token, and attention to the context (TeraPipe's features).
      {"affine", [](int64_t l, int64_t c) { return 3.0 + 0.5 * l + 0.01 * l * c + 0.002 * c; }},
      {"no overhead", [](int64_t l, int64_t c) { return 0.5 * l + 0.02 * l * c; }},
      {"large overhead", [](int64_t l, int64_t c) { return 40.0 + 0.1 * l + 0.001 * l * c; }},
      // Not monotone, nothing to exploit: a fixed random table.
      {"random", [noise](int64_t l, int64_t c) { return 1.0 + 10.0 * noise.uniform(static_cast<uint64_t>(l * 1000 + c)); }},
  };
  for (const auto& [name, t] : costs)
    for (int stages : {1, 2, 4, 16})
      for (int64_t m : {1, 3}) {
        const std::vector<int64_t> slices = best_token_slicing(kLength, kUnit, t, m, stages);
        int64_t total = 0;
        for (int64_t l : slices) {
          EXPECT_EQ(l % kUnit, 0);
          total += l;
        }
        EXPECT_EQ(total, kLength);
        EXPECT_NEAR(token_pipeline_latency(slices, t, m, stages), brute_force(kLength / kUnit, kUnit, t, m, stages),
                    1e-9)
            << name << " stages " << stages << " micro-batches " << m;
      }
}

TEST(BestTokenSlicing, SlicesMoreWithMoreStages) {
  const SliceCost t = [](int64_t l, int64_t c) { return 2.0 + 0.5 * l + 0.01 * l * c; };
  EXPECT_EQ(best_token_slicing(64, 8, t, 1, 1), std::vector<int64_t>{64});  // one stage: no pipeline to fill
  EXPECT_GT(best_token_slicing(64, 8, t, 1, 16).size(), 2u);
  EXPECT_THROW(best_token_slicing(60, 8, t, 1, 4), Error);
}

}  // namespace
}  // namespace tessera::pipeline
