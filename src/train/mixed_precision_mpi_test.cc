// Mixed precision under data, tensor and pipeline parallelism with the distributed optimizer's
// overlapped parameter all-gather: reusing rounded GEMM inputs (weight copies refreshed at their first
// use after each step, so after the all-gather of their bucket was waited for) gives bitwise the run
// of rounding both inputs in every GEMM.
#include <gtest/gtest.h>

#include <vector>

#include "comm/mpi_test_main.h"
#include "kernels/precision.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

TEST(MixedPrecisionLayouts, ReusedRoundedInputsGiveBitwiseTheRunOfRoundingInEveryGemm) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  struct Layout {
    int tp, pp;
    std::string extra;
  };
  std::vector<Layout> layouts = {{1, 1, "--use-distributed-optimizer --overlap-param-gather --overlap-grad-reduce"}};
  if (n % 2 == 0) {
    layouts.push_back({2, 1, "--sequence-parallel --use-distributed-optimizer --overlap-param-gather --overlap-grad-reduce"});
    layouts.push_back({1, 2, "--use-distributed-optimizer --overlap-param-gather --overlap-grad-reduce"});
  }
  for (const Layout& l : layouts)
    for (const char* precision : {"--bf16", "--fp16 --initial-loss-scale 4096"}) {
      SCOPED_TRACE(str_cat("tp=", l.tp, " pp=", l.pp, " ", l.extra, " ", precision));
      const int dp = n / (l.tp * l.pp);
      auto run = [&](bool reuse) {
        kernels::set_reuse_rounded_inputs(reuse);
        Trainer t(parse_train_arguments(testing::split_flags(testing::pipeline_model_flags(
                                            l.tp, l.pp, 1, 2 * dp, 6,
                                            str_cat(l.extra, " --ddp-bucket-size 777 ", precision))),
                                        n),
                  world.get());
        t.train();
        kernels::set_reuse_rounded_inputs(true);
        const Tensor& v = t.parameters().values();
        return std::make_pair(t.losses(), std::vector<float>(v.f32(), v.f32() + v.numel()));
      };
      const auto every_gemm = run(false);
      const auto reused = run(true);
      ASSERT_EQ(reused.first.size(), 6u);
      EXPECT_EQ(reused.first, every_gemm.first);
      EXPECT_EQ(reused.second, every_gemm.second);
    }
}

}  // namespace
}  // namespace tessera::train
