// The configuration a checkpoint records: it reads back as written, and a damaged field is refused by
// name before anything is sized by it (issue 57: num_layers 0 made `serve` allocate until out of memory).
#include "model/config.h"

#include <gtest/gtest.h>

#include <string>

#include "core/check.h"

namespace tessera::model {
namespace {

ModelConfig small_gpt() {
  ModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  c.kv_channels = 8;
  c.ffn_hidden_size = 128;
  c.seq_length = 16;
  c.max_position_embeddings = 16;
  c.vocab_size = 60;
  c.padded_vocab_size = 64;
  c.position_embedding = PositionEmbedding::Rope;
  return c;
}

// The error config_from_json gives for `json` with `field` set to `value` ("" when it reads).
std::string error_with(const char* field, const nlohmann::json& value, const char* moe_field = nullptr) {
  ModelConfig c = small_gpt();
  c.moe.layer_experts = {4, 4};
  c.moe.ffn_hidden_size = 64;
  nlohmann::json j = to_json(c);
  (moe_field ? j["moe"][moe_field] : j[field]) = value;
  try {
    config_from_json(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, ReadsBackAsWritten) {
  ModelConfig c = small_gpt();
  c.moe.layer_experts = {0, 8};
  c.moe.ffn_hidden_size = 48;
  c.moe.router.topk = 2;
  const ModelConfig r = config_from_json(to_json(c));
  EXPECT_EQ(to_json(r), to_json(c));
  EXPECT_EQ(r.num_query_groups, 2);
  EXPECT_EQ(r.moe.layer_experts, (std::vector<int64_t>{0, 8}));
}

TEST(ModelConfig, RefusesEachImpossibleFieldByName) {
  EXPECT_EQ(error_with("num_layers", 2), "");
  for (const char* field : {"num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
                            "seq_length", "max_position_embeddings", "vocab_size", "padded_vocab_size"}) {
    for (const nlohmann::json& bad : {nlohmann::json(0), nlohmann::json(-3), nlohmann::json(int64_t{1} << 40)}) {
      const std::string e = error_with(field, bad);
      EXPECT_NE(e.find(std::string("model configuration: ") + field + " is " + bad.dump()), std::string::npos)
          << field << "=" << bad << ": " << e;
    }
  }
  EXPECT_NE(error_with("num_query_groups", 3).find("must divide num_attention_heads (4)"), std::string::npos);
  EXPECT_NE(error_with("padded_vocab_size", 50).find("must be at least vocab_size (60)"), std::string::npos);
  EXPECT_NE(error_with("norm_epsilon", 0.0).find("norm_epsilon is 0"), std::string::npos);
  EXPECT_NE(error_with("rotary_percent", 1.5).find("rotary_percent is 1.5"), std::string::npos);
  EXPECT_NE(error_with("hidden_dropout", -0.5).find("hidden_dropout is -0.5"), std::string::npos);
  EXPECT_NE(error_with("num_tokentypes", -1).find("num_tokentypes is -1"), std::string::npos);
  EXPECT_NE(error_with("num_layers", "two").find("num_layers is \"two\", not an integer"), std::string::npos);
  // Mixture of experts: one entry per layer, k within a layer's experts, a positive expert width.
  EXPECT_NE(error_with("", nlohmann::json::array({4}), "layer_experts").find("one per layer (2)"), std::string::npos);
  EXPECT_NE(error_with("", 5, "moe_router_topk").find("must not exceed a layer's experts (4)"), std::string::npos);
  EXPECT_NE(error_with("", 0, "moe_router_topk").find("moe_router_topk is 0"), std::string::npos);
  EXPECT_NE(error_with("", 0, "moe_ffn_hidden_size").find("moe_ffn_hidden_size is 0"), std::string::npos);
  // DeepSeek-V3's routing: the expert bias needs sigmoid scores, groups need a group top-k that fits.
  EXPECT_NE(error_with("", true, "moe_router_enable_expert_bias").find("needs moe_router_score_function sigmoid"),
            std::string::npos);
  EXPECT_NE(error_with("", 2, "moe_router_num_groups").find("needs moe_router_group_topk"), std::string::npos);
  EXPECT_NE(error_with("", 3, "moe_router_group_topk").find("moe_router_group_topk is 3"), std::string::npos);
}

TEST(ModelConfig, GroupLimitedRoutingAndExpertBiasReadBackAndOlderConfigsReadWithout) {
  ModelConfig c = small_gpt();
  c.moe.layer_experts = {8, 8};
  c.moe.ffn_hidden_size = 48;
  c.moe.router.topk = 4;
  c.moe.router.score = kernels::RouterScoreFunction::Sigmoid;
  c.moe.router.num_groups = 4;
  c.moe.router.group_topk = 2;
  c.moe.expert_bias = true;
  const ModelConfig r = config_from_json(to_json(c));
  EXPECT_EQ(to_json(r), to_json(c));
  EXPECT_EQ(r.moe.router.num_groups, 4);
  EXPECT_EQ(r.moe.router.group_topk, 2);
  EXPECT_TRUE(r.moe.expert_bias);
  nlohmann::json old = to_json(c);
  for (const char* key : {"moe_router_num_groups", "moe_router_group_topk", "moe_router_enable_expert_bias"})
    old["moe"].erase(key);
  const ModelConfig o = config_from_json(old);
  EXPECT_FALSE(o.moe.router.grouped());
  EXPECT_FALSE(o.moe.expert_bias);
}

// RoPE scaling and q/k norms are written only when set (older checkpoints read as before) and read back.
TEST(ModelConfig, RopeScalingAndQkLayernormReadBack) {
  ModelConfig c = small_gpt();
  EXPECT_FALSE(to_json(c).contains("rope_scaling"));
  EXPECT_FALSE(to_json(c).contains("qk_layernorm"));
  c.rope_scaling = RopeScaling::Llama3;
  c.rope_scaling_factor = 32;
  c.rope_high_freq_factor = 2;
  c.rope_original_max_position = 1024;
  c.qk_layernorm = true;
  ModelConfig r = config_from_json(to_json(c));
  EXPECT_EQ(to_json(r), to_json(c));
  EXPECT_EQ(r.rope_scaling, RopeScaling::Llama3);
  EXPECT_EQ(r.rope_scaling_factor, 32);
  EXPECT_EQ(r.rope_high_freq_factor, 2);
  EXPECT_EQ(r.rope_original_max_position, 1024);
  EXPECT_TRUE(r.qk_layernorm);
  c.rope_scaling = RopeScaling::Linear;
  r = config_from_json(to_json(c));
  EXPECT_EQ(r.rope_scaling, RopeScaling::Linear);
  EXPECT_EQ(r.rope_scaling_factor, 32);

  nlohmann::json j = to_json(c);
  j["rope_scaling"] = "yarn";
  EXPECT_THROW(config_from_json(j), Error);
  c.rope_scaling = RopeScaling::Llama3;
  c.rope_high_freq_factor = 1;  // the smooth band would divide by zero
  EXPECT_THROW(validate_config(c), Error);
  c.rope_high_freq_factor = 4;
  c.rope_scaling_factor = 0;
  EXPECT_THROW(validate_config(c), Error);
}

TEST(ModelConfig, AnAllExpertModelNeedsNoDenseWidth) {
  ModelConfig c = small_gpt();
  c.moe.layer_experts = {4, 4};
  c.moe.ffn_hidden_size = 64;
  c.ffn_hidden_size = 0;
  EXPECT_NO_THROW(validate_config(c));
  c.moe.layer_experts = {0, 4};
  EXPECT_THROW(validate_config(c), Error);
}

}  // namespace
}  // namespace tessera::model
