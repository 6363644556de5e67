// The Multi-Latent Attention flags: what they make of the model, and the rules, checked before any work
// with the flag, the value and the rule named.
#include <gtest/gtest.h>

#include <cmath>

#include "train/args/arguments.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

const std::string kMlaBase = testing::kSmallRunFlags + "--multi-latent-attention ";

TrainArguments parse_mla(const std::string& extra, int world = 1) {
  return parse_train_arguments(testing::split_flags(kMlaBase + extra), world);
}

std::string mla_error_of(const std::string& flags, int world = 1) {
  try {
    parse_train_arguments(testing::split_flags(flags), world);
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(MlaArguments, FlagsWriteTheModelsMlaConfiguration) {
  model::MlaConfig m = parse_mla("").model.mla;  // Megatron's defaults: no query compression, YaRN
  EXPECT_TRUE(m.enabled);
  EXPECT_EQ(m.q_lora_rank, 0);
  EXPECT_EQ(m.kv_lora_rank, 32);
  EXPECT_EQ(m.qk_head_dim, 128);
  EXPECT_EQ(m.qk_pos_emb_head_dim, 64);
  EXPECT_EQ(m.v_head_dim, 128);
  EXPECT_TRUE(m.yarn);
  EXPECT_EQ(m.rotary_scaling_factor, 1.0);
  EXPECT_EQ(m.original_max_position_embeddings, 4096);
  m = parse_mla("--q-lora-rank 24 --kv-lora-rank 16 --qk-head-dim 8 --qk-pos-emb-head-dim 4 --v-head-dim 6 "
                "--rope-type rope --rotary-scaling-factor 40 --mscale 1 --mscale-all-dim 1 --yarn-beta-fast 16 "
                "--yarn-beta-slow 2 --yarn-original-max-position-embeddings 64")
          .model.mla;
  EXPECT_EQ(m.q_lora_rank, 24);
  EXPECT_EQ(m.kv_lora_rank, 16);
  EXPECT_EQ(m.q_head_dim(), 12);
  EXPECT_EQ(m.v_head_dim, 6);
  EXPECT_FALSE(m.yarn);
  EXPECT_EQ(m.beta_fast, 16.0);
  EXPECT_EQ(m.beta_slow, 2.0);
  EXPECT_EQ(m.original_max_position_embeddings, 64);
  // DeepSeek-V3's softmax scale: (0.1 ln 40 + 1)^2 / sqrt(q_head_dim), whatever the rope type (Megatron's).
  const double ms = 0.1 * std::log(40.0) + 1;
  EXPECT_NEAR(m.softmax_scale(), ms * ms / std::sqrt(12.0), 1e-12);
  EXPECT_FALSE(parse_train_arguments(testing::split_flags(testing::kSmallRunFlags), 1).model.mla.enabled);
}

TEST(MlaArguments, BadValuesAndCombinationsAreRefusedByName) {
  const std::string base = kMlaBase;
  const std::pair<std::string, std::string> cases[] = {
      {"--qk-pos-emb-head-dim 3", "--qk-pos-emb-head-dim=3: must be even (RoPE rotates pairs of dimensions)"},
      {"--qk-pos-emb-head-dim 0", "--qk-pos-emb-head-dim=0: must be positive"},
      {"--kv-lora-rank 0", "--kv-lora-rank=0: must be positive"},
      {"--qk-head-dim -1", "--qk-head-dim=-1: must be positive"},
      {"--v-head-dim 0", "--v-head-dim=0: must be positive"},
      {"--q-lora-rank -2", "--q-lora-rank=-2: must not be negative (0 or left out: no query compression)"},
      {"--rope-type ntk", "--rope-type=ntk: must be rope or yarn"},
      {"--rotary-scaling-factor 0", "--rotary-scaling-factor=0: must be positive"},
      {"--yarn-beta-fast -1", "--yarn-beta-fast=-1: must be positive"},
      {"--rotary-scaling-factor 40 --mscale-all-dim -20",
       "--mscale-all-dim=-20: gives a YaRN mscale of 0.1 x mscale x ln(--rotary-scaling-factor=40) + 1 that is "
       "not positive"},
      {"--group-query-attention --num-query-groups 2",
       "--multi-latent-attention=set: cannot be combined with --group-query-attention (MLA's keys and values are "
       "per head, from one latent)"},
      {"--position-embedding-type rope --rotary-percent 0.5",
       "--multi-latent-attention=set: cannot be combined with --rotary-percent=0.5 (MLA rotates its whole "
       "--qk-pos-emb-head-dim part)"},
  };
  for (const auto& [extra, message] : cases) EXPECT_EQ(mla_error_of(base + extra, 2), message) << extra;
  // Context parallelism runs MLA's heads around the ring, token slices cache their keys and values (issue 53).
  EXPECT_EQ(mla_error_of(base + "--context-parallel-size 2", 2), "accepted");
  EXPECT_EQ(mla_error_of(base + "--pipeline-token-slices 8,8", 2), "accepted");
  EXPECT_EQ(mla_error_of(testing::kSmallRunFlags + "--rope-type yarn"),
            "--rope-type=yarn: needs --multi-latent-attention (YaRN is MLA's RoPE)");
  // The GPU path runs MLA (issue 53): --device cuda is accepted where a GPU is usable and refused only for
  // the want of one elsewhere (train/device_setup_test.cc has the rules on fake machines).
  const std::string on_gpu = mla_error_of(base + "--device cuda");
  EXPECT_TRUE(on_gpu == "accepted" || on_gpu.rfind("--device=cuda: no usable GPU: ", 0) == 0) << on_gpu;
}

}  // namespace
}  // namespace tessera::train
