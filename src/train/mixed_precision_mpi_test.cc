// Mixed precision under data, tensor and pipeline parallelism with the distributed optimizer's
// overlapped parameter all-gather: reusing rounded GEMM inputs (weight copies refreshed at their first
// use after each step, so after the all-gather of their bucket was waited for) gives bitwise the run
// of rounding both inputs in every GEMM. Zero-bubble schedules in bf16 and fp16: the weight-gradient GEMMs
// deferred to W round the inputs saved in B as 1F1B rounds them at once.
#include <gtest/gtest.h>

#include <map>
#include <string>
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

// ZB-H1 and ZB-V at pp 2 (dp with the rest of the ranks) in bf16 and fp16: the losses and the final
// weights equal 1F1B's on the same ranks bit for bit; W passes accumulate each weight gradient in
// micro-batch order, as 1F1B's backward passes do.
TEST(MixedPrecisionLayouts, ZeroBubbleSchedulesGiveBitwiseTheOneFOneBRun) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  if (n % 2 != 0) GTEST_SKIP() << "pp 2 needs an even number of ranks";
  const int dp = n / 2;
  for (const char* precision : {"--bf16", "--fp16 --initial-loss-scale 4096"}) {
    // The losses and each weight this rank holds, by name (layer numbers are global).
    auto run = [&](const std::string& schedule) {
      Trainer t(parse_train_arguments(testing::split_flags(testing::pipeline_model_flags(
                                          1, 2, 1, 4 * dp, 4, str_cat(schedule, " --untie-embeddings-and-output-weights ", precision))),
                                      n),
                world.get());
      t.train();
      std::map<std::string, std::vector<float>> weights;
      for (const model::Parameter& p : t.parameters().params())
        weights[p.spec.name].assign(p.value.f32(), p.value.f32() + p.value.numel());
      return std::make_pair(t.losses(), weights);
    };
    for (const char* schedule : {"--enable-zero-bubble", "--zero-bubble-v-schedule"}) {
      SCOPED_TRACE(str_cat(schedule, " ", precision));
      // ZB-V holds other layers on a rank (chunks 0 and 3 on rank 0), so its gradient norm sums the
      // squares in another order: no clipping there, for the rest to be compared bit for bit.
      const std::string clip = std::string(schedule) == "--zero-bubble-v-schedule" ? " --clip-grad 0" : "";
      const auto one_f_one_b = run(clip);
      const auto zero_bubble = run(schedule + clip);
      ASSERT_EQ(zero_bubble.first.size(), 4u);
      EXPECT_EQ(zero_bubble.first, one_f_one_b.first);
      // The weights held by both runs.
      int compared = 0;
      for (const auto& [name, values] : zero_bubble.second) {
        auto same = one_f_one_b.second.find(name);
        if (same == one_f_one_b.second.end()) continue;
        EXPECT_EQ(values, same->second) << name;
        ++compared;
      }
      EXPECT_GT(compared, 0);
    }
  }
}

}  // namespace
}  // namespace tessera::train
