#include "train/model_flags.h"

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
  EXPECT_EQ(c[1].given, "9.99999997e-07");
}

}  // namespace
}  // namespace tessera::train
