#include "train/args/model_flags.h"

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

namespace tessera::train {
namespace {

// The configuration of a small Llama-style checkpoint.
model::ModelConfig saved_config() {
  model::ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  c.kv_channels = 8;
  c.ffn_hidden_size = 64;
  c.seq_length = 16;
  c.max_position_embeddings = 32;
  c.position_embedding = model::PositionEmbedding::Rope;
  c.normalization = model::Normalization::RMSNorm;
  c.norm_epsilon = 1e-5f;
  c.swiglu = true;
  c.add_bias_linear = false;
  return c;
}

// The conflicts of a command line of model flags with saved_config().
std::vector<ModelFlagConflict> conflicts_of(std::vector<std::string> args) {
  CLI::App app;
  TrainArguments a;
  add_model_flags(app, a);
  std::reverse(args.begin(), args.end());
  app.parse(args);
  return model_flag_conflicts(app, a, saved_config());
}

TEST(ModelFlags, AgreeingAndAbsentFlagsDoNotConflict) {
  EXPECT_TRUE(conflicts_of({}).empty());
  EXPECT_TRUE(conflicts_of({"--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length",
                            "16", "--max-position-embeddings", "32", "--ffn-hidden-size", "64",
                            "--group-query-attention", "--num-query-groups", "2", "--position-embedding-type", "rope",
                            "--normalization", "RMSNorm", "--norm-epsilon", "1e-05", "--swiglu", "--disable-bias-linear",
                            "--kv-channels", "8", "--rotary-base", "10000"})
                  .empty());
  // What does not change the saved weights' function is never a conflict.
  EXPECT_TRUE(conflicts_of({"--hidden-dropout", "0.5", "--init-method-std", "1", "--make-vocab-size-divisible-by", "7"})
                  .empty());
  // Training ignores --num-query-groups without --group-query-attention; so does the check.
  EXPECT_TRUE(conflicts_of({"--num-query-groups", "4"}).empty());
}

TEST(ModelFlags, ConflictsNameFlagGivenAndSaved) {
  auto c = conflicts_of({"--hidden-size", "64", "--normalization", "LayerNorm", "--untie-embeddings-and-output-weights"});
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(describe(c),
            "--hidden-size=64 (the checkpoint's: 32); --normalization=LayerNorm (the checkpoint's: RMSNorm); "
            "--untie-embeddings-and-output-weights=true (the checkpoint's: false)");
  c = conflicts_of({"--group-query-attention", "--num-query-groups", "4"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].flag, "--num-query-groups");
  EXPECT_EQ(c[0].saved, "2");
  // --group-query-attention alone means Megatron's default of one group.
  c = conflicts_of({"--group-query-attention"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].flag, "--group-query-attention");
  c = conflicts_of({"--norm-epsilon", "1e-6", "--position-embedding-type", "learned_absolute"});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].flag, "--position-embedding-type");
  EXPECT_EQ(c[1].flag, "--norm-epsilon");
  EXPECT_EQ(c[1].given, "1e-06");  // the shortest decimal of the float, as it was given
}

// A resumed run keeps the checkpoint's RoPE scaling and q/k norms.
TEST(ModelFlags, RopeScalingAndQkLayernormMustMatch) {
  auto c = conflicts_of({"--use-rope-scaling", "--qk-layernorm"});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(describe(c), "--use-rope-scaling=true (the checkpoint's: false); --qk-layernorm=true (the checkpoint's: false)");
  c = conflicts_of({"--rotary-seq-len-interpolation-factor", "2"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].saved, "none");
  model::ModelConfig saved = saved_config(), run = saved;
  run.rope_scaling = model::RopeScaling::Llama3;
  run.qk_layernorm = true;
  const auto d = model_differences(run, saved);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].flag, "--use-rope-scaling");
  EXPECT_FALSE(d[0].changes_shapes);
  EXPECT_EQ(d[1].flag, "--qk-layernorm");
  EXPECT_TRUE(d[1].changes_shapes);  // the norms' weights
}

// train --load: the whole run's model against the checkpoint's, each difference marked by whether the
// weights' shapes change (what --finetune cannot load either).
TEST(ModelFlags, DifferencesOfARunFromItsCheckpoint) {
  const model::ModelConfig saved = saved_config();
  EXPECT_TRUE(model_differences(saved, saved).empty());
  model::ModelConfig run = saved;
  run.hidden_dropout = 0.5f, run.init_method_std = 1.0f, run.seq_length = 8, run.padded_vocab_size = 999;
  EXPECT_TRUE(model_differences(run, saved).empty()) << "run settings are not the model";

  // Twice the heads of half the channels and twice the groups: the projections keep their shapes.
  run = saved;
  run.num_attention_heads = 8, run.num_query_groups = 4, run.kv_channels = 4;
  std::vector<ModelDifference> d = model_differences(run, saved);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(describe(d), "--num-attention-heads=8 (the checkpoint's: 4); --num-query-groups=4 (the checkpoint's: 2)");
  EXPECT_FALSE(d[0].changes_shapes || d[1].changes_shapes);
  run.num_query_groups = 8;  // no longer grouped: the key/value projection grows
  d = model_differences(run, saved);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(d[0].changes_shapes && d[1].changes_shapes);

  run = saved;
  run.num_layers = 3, run.rotary_base = 5e5f, run.swiglu = false, run.vocab_size = 7;
  d = model_differences(run, saved);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(describe(d), "--num-layers=3 (the checkpoint's: 2); --rotary-base=500000 (the checkpoint's: 10000); "
                         "--swiglu=false (the checkpoint's: true); the tokenizer's vocabulary (ids)=7 (the checkpoint's: 0)");
  EXPECT_TRUE(d[0].changes_shapes);
  EXPECT_FALSE(d[1].changes_shapes);
  EXPECT_TRUE(d[2].changes_shapes && d[3].changes_shapes);

  // Experts per layer, with --moe-layer-freq's dense layers named per layer.
  run = saved;
  run.moe.layer_experts = {0, 8};
  run.moe.ffn_hidden_size = 16;
  d = model_differences(run, saved);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(describe(d), "--num-experts=0 8 (the checkpoint's: 0)");
  model::ModelConfig moe = run;
  moe.moe.router.topk = 1;
  d = model_differences(moe, run);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].flag, "--moe-router-topk");
  EXPECT_FALSE(d[0].changes_shapes);
}

}  // namespace
}  // namespace tessera::train
