// Zero-bubble lists rebuilt from measured F, B and W costs (--zero-bubble-pipeline-timers-start-iter and
// -end-iter, train/zero_bubble_timing.h): ZB-H1 and ZB-V at pp 2 (dp over the other ranks) take the costs
// every rank measured in iterations 2-3 and train on with the rebuilt lists, and the losses and the final
// weights are those of the run that keeps the unit-cost lists, bit for bit: the lists only move passes
// around, each weight's W passes staying in micro-batch order. (Untied embeddings: under ZB-V a tied word
// embedding on rank 0 sums the output layer's W and the embedding's B contributions in the list's order,
// so other lists change its last bits, as another reduction order would.)
#include <gtest/gtest.h>

#include "comm/mpi_test_main.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

TEST(ZeroBubbleTiming, ListsFromMeasuredCostsTrainAsTheUnitCostLists) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  if (n % 2 != 0) GTEST_SKIP() << "pp 2 needs an even number of ranks";
  const int dp = n / 2;
  for (const char* schedule : {"--enable-zero-bubble", "--zero-bubble-v-schedule"}) {
    SCOPED_TRACE(schedule);
    auto run = [&](const std::string& timers) {
      auto t = std::make_unique<Trainer>(
          parse_train_arguments(testing::split_flags(testing::pipeline_model_flags(
                                    1, 2, 1, 6 * dp, 6, str_cat(schedule, " --untie-embeddings-and-output-weights ", timers))),
                                n),
          world.get());
      t->train();
      return t;
    };
    const auto unit = run("");  // timed from iteration 100: never within 6
    const auto measured = run("--zero-bubble-pipeline-timers-start-iter 1 --zero-bubble-pipeline-timers-end-iter 3");
    EXPECT_FALSE(unit->zero_bubble_costs());
    ASSERT_TRUE(measured->zero_bubble_costs());
    const pipeline::ZeroBubbleCosts c = *measured->zero_bubble_costs();
    EXPECT_GT(c.forward, 0);
    EXPECT_GT(c.backward_input, 0);
    EXPECT_GT(c.backward_weight, 0);
    EXPECT_EQ(measured->losses(), unit->losses());
    const Tensor& a = measured->parameters().values();
    const Tensor& b = unit->parameters().values();
    ASSERT_EQ(a.numel(), b.numel());
    EXPECT_EQ(std::vector<float>(a.f32(), a.f32() + a.numel()), std::vector<float>(b.f32(), b.f32() + b.numel()));
  }
}

}  // namespace
}  // namespace tessera::train
