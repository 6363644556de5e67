// The straggler report's ranking (the gathering and the injected delay are tests/resilience_cli.sh's).
#include "train/straggler_report.h"

#include <gtest/gtest.h>

namespace tessera::train {
namespace {

TEST(StragglerReport, NamesTheSlowestAndFastestRanksWithTheirRatioToTheMedian) {
  // Rank 2 computes 4x the others; the others wait for it in communication.
  const std::vector<RankTimes> ranks = {{50, 10, 40}, {50, 11, 39}, {50, 40, 10}, {50, 10, 40}};
  const std::string line = straggler_report(ranks, 1, 20);
  EXPECT_NE(line.find("at iteration 20"), std::string::npos) << line;
  EXPECT_NE(line.find("compute over the median 10.5 of 4 ranks"), std::string::npos) << line;
  EXPECT_NE(line.find("slowest: rank 2 3.81x (step 50.0, compute 40.0, communication 10.0)"), std::string::npos)
      << line;
  EXPECT_NE(line.find("fastest: rank 3 0.95x"), std::string::npos) << line;
}

TEST(StragglerReport, MinMaxCountNamesThatManyRanksEachWay) {
  const std::vector<RankTimes> ranks = {{10, 1, 0}, {10, 2, 0}, {10, 3, 0}};
  const std::string line = straggler_report(ranks, 2, 5);
  EXPECT_NE(line.find("slowest: rank 2 1.50x (step 10.0, compute 3.0, communication 0.0), rank 1 1.00x"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("fastest: rank 0 0.50x (step 10.0, compute 1.0, communication 0.0), rank 1"), std::string::npos)
      << line;
  // More than there are ranks: each rank once per list.
  EXPECT_NE(straggler_report({{1, 1, 0}}, 3, 1).find("slowest: rank 0 1.00x (step 1.0, compute 1.0, communication 0.0) "
                                                     "| fastest: rank 0 1.00x"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::train
