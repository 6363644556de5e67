// The expert bias's update rule (train/expert_bias.h) on known count vectors: rate * sign(mean - count),
// exact at the mean, applied to each layer's bias from its own experts' counts, and never to a trained
// parameter; and the argument rules of aux-loss-free balancing and group-limited routing.
#include "train/expert_bias.h"

#include <gtest/gtest.h>

#include "core/check.h"
#include "core/testing.h"
#include "train/args/arguments.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

TEST(ExpertBias, StepIsTheRateTimesTheSignOfMeanMinusCount) {
  // mean 8: the over-loaded expert 0 goes down, the under-loaded expert 1 up, those at the mean stay.
  EXPECT_EQ(expert_bias_step({10, 6, 8, 8}, 1e-3f), (std::vector<float>{-1e-3f, 1e-3f, 0.0f, 0.0f}));
  // mean 7/3, not a whole number: nobody is at it.
  EXPECT_EQ(expert_bias_step({3, 2, 2}, 0.5f), (std::vector<float>{-0.5f, 0.5f, 0.5f}));
  // Even load (or no tokens at all): no step.
  EXPECT_EQ(expert_bias_step({5, 5, 5, 5}, 1.0f), (std::vector<float>(4, 0.0f)));
  EXPECT_EQ(expert_bias_step({0, 0}, 1.0f), (std::vector<float>(2, 0.0f)));
  // Counts past float precision keep their exact sign: the mean is 2^25 + 1/2.
  EXPECT_EQ(expert_bias_step({(int64_t{1} << 25) + 1, int64_t{1} << 25}, 1.0f), (std::vector<float>{-1.0f, 1.0f}));
}

TEST(ExpertBias, EachLayerMovesByItsOwnExpertsCounts) {
  model::ParameterSet params;
  model::ParameterSpec w{"decoder.layers.0.mlp.router.weight", {4, 2}, model::Init::Zeros, 0.0f, true};
  model::ParameterSpec b0{"decoder.layers.0.mlp.router.expert_bias", {4}, model::Init::Zeros, 0.0f, false};
  model::ParameterSpec b2{"decoder.layers.2.mlp.router.expert_bias", {2}, model::Init::Zeros, 0.0f, false};
  b0.expert_bias_offset = 0;
  b2.expert_bias_offset = 4;
  model::Parameter* weight = params.add(w);
  model::Parameter* first = params.add(b0);
  model::Parameter* second = params.add(b2);
  params.allocate(1);
  // Layer 0's experts 0-3 (mean 4), layer 2's experts 4-5 (mean 1).
  const std::vector<double> kept = {1, 4, 4, 7, 2, 0};
  update_expert_biases(params, kept, 6, {}, 0.25f);
  update_expert_biases(params, kept, 6, {}, 0.25f);
  auto values = [](const model::Parameter* p) {
    return std::vector<float>(p->value.host_f32(), p->value.host_f32() + p->value.numel());
  };
  EXPECT_EQ(values(first), (std::vector<float>{0.5f, 0.0f, 0.0f, -0.5f}));
  EXPECT_EQ(values(second), (std::vector<float>{-0.5f, 0.5f}));
  EXPECT_EQ(values(weight), std::vector<float>(8, 0.0f));
  EXPECT_FALSE(first->spec.trained());
  EXPECT_TRUE(weight->spec.trained());
  // A count vector longer than the model's experts is a mistake, named.
  EXPECT_THROW(update_expert_biases(params, kept, 5, {}, 0.25f), Error);
}

// The flags' rules, each refused by name before any work.
TEST(ExpertBiasArguments, BadCombinationsAreRefusedByName) {
  const std::string moe = testing::kSmallRunFlags + "--num-experts 8 --moe-router-topk 4 ";
  auto error = [](const std::string& flags) {
    return tessera::testing::error_of([&] { parse_train_arguments(testing::split_flags(flags)); });
  };
  EXPECT_EQ(error(moe + "--moe-router-score-function sigmoid --moe-router-enable-expert-bias "
                        "--moe-router-num-groups 4 --moe-router-group-topk 2"),
            "");
  EXPECT_NE(error(testing::kSmallRunFlags + "--moe-router-enable-expert-bias").find(
                "--moe-router-enable-expert-bias=set: needs --num-experts"),
            std::string::npos);
  EXPECT_NE(error(moe + "--moe-router-enable-expert-bias").find(
                "--moe-router-enable-expert-bias=set: needs --moe-router-score-function sigmoid"),
            std::string::npos);
  EXPECT_NE(error(moe + "--moe-router-score-function sigmoid --moe-router-enable-expert-bias "
                        "--moe-router-bias-update-rate -1")
                .find("--moe-router-bias-update-rate=-1: must be a finite number >= 0"),
            std::string::npos);
  EXPECT_NE(error(moe + "--moe-router-group-topk 2").find("--moe-router-group-topk=2: needs --moe-router-num-groups"),
            std::string::npos);
  EXPECT_NE(error(moe + "--moe-router-num-groups 4").find("--moe-router-num-groups=4: needs --moe-router-group-topk"),
            std::string::npos);
  EXPECT_NE(error(moe + "--moe-router-num-groups 2 --moe-router-group-topk 4")
                .find("--moe-router-group-topk=4: must not exceed --moe-router-num-groups=2"),
            std::string::npos);
  EXPECT_NE(error(moe + "--moe-router-num-groups 3 --moe-router-group-topk 1")
                .find("--moe-router-num-groups=3: must divide --num-experts=8"),
            std::string::npos);
  EXPECT_NE(error(testing::kSmallRunFlags + "--num-experts 8 --moe-router-topk 3 --moe-router-num-groups 4 "
                                            "--moe-router-group-topk 2")
                .find("--moe-router-topk=3: must be divisible by --moe-router-group-topk=2"),
            std::string::npos);
  EXPECT_NE(error(testing::kSmallRunFlags + "--num-experts 8 --moe-router-topk 6 --moe-router-num-groups 4 "
                                            "--moe-router-group-topk 2")
                .find("--moe-router-topk=6: must not exceed --moe-router-group-topk=2 x the 2 experts of a group"),
            std::string::npos);
  EXPECT_NE(error(testing::kSmallRunFlags + "--moe-router-num-groups 2").find("needs --num-experts"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::train
