#include "ckpt/hf_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace tessera::ckpt {
namespace {

using nlohmann::json;

json gpt2() {
  return {{"architectures", {"GPT2LMHeadModel"}}, {"vocab_size", 50304}, {"n_positions", 1024}, {"n_embd", 768},
          {"n_layer", 12}, {"n_head", 12}, {"n_inner", nullptr}, {"activation_function", "gelu_new"}};
}
json llama() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 32000}, {"hidden_size", 256},
          {"intermediate_size", 688}, {"num_hidden_layers", 4}, {"num_attention_heads", 8},
          {"num_key_value_heads", 2}, {"max_position_embeddings", 2048}, {"tie_word_embeddings", false}};
}
json mixtral() {
  return {{"architectures", {"MixtralForCausalLM"}}, {"vocab_size", 32000}, {"hidden_size", 256},
          {"intermediate_size", 512}, {"num_hidden_layers", 3}, {"num_attention_heads", 8},
          {"num_key_value_heads", 2}, {"max_position_embeddings", 4096}, {"num_local_experts", 8},
          {"num_experts_per_tok", 2}, {"router_aux_loss_coef", 0.02}, {"sliding_window", nullptr}};
}

json bert(const char* arch) {
  return {{"architectures", {arch}}, {"vocab_size", 30522}, {"hidden_size", 768}, {"num_hidden_layers", 12},
          {"num_attention_heads", 12}, {"intermediate_size", 3072}, {"max_position_embeddings", 512},
          {"type_vocab_size", 2}, {"hidden_act", "gelu_new"}, {"layer_norm_eps", 1e-12}};
}

std::string config_error(const json& j) {
  try {
    parse_hf_config(j.dump(), "m/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HfConfig, ReadsBothFamilies) {
  HfConfig g = parse_hf_config(gpt2().dump(), "config.json");
  EXPECT_EQ(g.family, HfFamily::Gpt2);
  EXPECT_EQ(g.config.num_layers, 12);
  EXPECT_EQ(g.config.ffn_hidden_size, 4 * 768);
  EXPECT_EQ(g.config.kv_channels, 64);
  EXPECT_EQ(g.config.padded_vocab_size, 50304);
  HfConfig l = parse_hf_config(llama().dump(), "config.json");
  EXPECT_EQ(l.family, HfFamily::Llama);
  EXPECT_EQ(l.config.num_query_groups, 2);
  EXPECT_EQ(l.config.kv_channels, 32);
  EXPECT_TRUE(l.config.swiglu);
  EXPECT_TRUE(l.config.untie_embeddings_and_output_weights);
}

// Llama 3.x's rope_scaling (either spelling of its type) and linear are read; the other types are refused
// by name, as is a Qwen3 sliding window.
TEST(HfConfig, ReadsRopeScalingAndQwen3) {
  json l = llama();
  l["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  model::ModelConfig c = parse_hf_config(l.dump(), "config.json").config;
  EXPECT_EQ(c.rope_scaling, model::RopeScaling::Llama3);
  EXPECT_EQ(c.rope_scaling_factor, 32.0);
  EXPECT_EQ(c.rope_original_max_position, 8192);
  l["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  c = parse_hf_config(l.dump(), "config.json").config;
  EXPECT_EQ(c.rope_scaling, model::RopeScaling::Linear);
  EXPECT_EQ(c.rope_scaling_factor, 2.0);
  l["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse_hf_config(l.dump(), "config.json").config.rope_scaling, model::RopeScaling::None);
  for (const char* type : {"yarn", "dynamic", "longrope"}) {
    l["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}};
    EXPECT_NE(config_error(l).find(std::string("rope_scaling type '") + type + "' is not supported"), std::string::npos)
        << type;
  }
  json q = llama();
  q["architectures"] = {"Qwen3ForCausalLM"};
  q["head_dim"] = 64;  // not hidden / heads
  HfConfig qwen3 = parse_hf_config(q.dump(), "config.json");
  EXPECT_EQ(qwen3.family, HfFamily::Qwen3);
  EXPECT_TRUE(qwen3.config.qk_layernorm);
  EXPECT_EQ(qwen3.config.kv_channels, 64);
  EXPECT_FALSE(qwen3.config.add_bias_linear);
  q["use_sliding_window"] = true;
  EXPECT_NE(config_error(q).find("no sliding-window attention"), std::string::npos);
}

TEST(HfConfig, ReadsMixtralAsAnAllMoeLlama) {
  HfConfig m = parse_hf_config(mixtral().dump(), "config.json");
  EXPECT_EQ(m.family, HfFamily::Mixtral);
  EXPECT_TRUE(m.config.swiglu);
  EXPECT_FALSE(m.config.add_bias_linear);
  EXPECT_EQ(m.config.moe.layer_experts, (std::vector<int64_t>{8, 8, 8}));
  EXPECT_EQ(m.config.moe.ffn_hidden_size, 512);
  EXPECT_EQ(m.config.moe.router.topk, 2);
  EXPECT_FALSE(m.config.moe.router.pre_softmax);
  EXPECT_FLOAT_EQ(m.config.moe.aux_loss_coeff, 0.02f);
  // Absent fields take MixtralConfig's defaults, not LlamaConfig's.
  json defaults = mixtral();
  for (const char* key : {"num_key_value_heads", "num_local_experts", "num_experts_per_tok"}) defaults.erase(key);
  HfConfig d = parse_hf_config(defaults.dump(), "config.json");
  EXPECT_EQ(d.config.num_query_groups, 8);
  EXPECT_EQ(d.config.moe.layer_experts[0], 8);
  EXPECT_EQ(d.config.moe.router.topk, 2);
  EXPECT_FLOAT_EQ(d.config.rotary_base, 1e6f);
  EXPECT_FLOAT_EQ(d.config.norm_epsilon, 1e-5f);
  // A sliding window as long as the context is full attention; a shorter one is refused.
  json window = mixtral();
  window["sliding_window"] = 4096;
  EXPECT_EQ(config_error(window), "");
  window["sliding_window"] = 4095;
  EXPECT_NE(config_error(window).find("sliding_window 4095 is shorter"), std::string::npos) << config_error(window);
  auto with = [](json j, const char* key, json v) {
    j[key] = std::move(v);
    return j;
  };
  EXPECT_NE(config_error(with(mixtral(), "num_experts_per_tok", 9)).find("experts per token = 9 must be in [1, 8]"),
            std::string::npos);
  EXPECT_NE(config_error(with(mixtral(), "num_local_experts", 0)).find("no layer has experts"),
            std::string::npos)
      << config_error(with(mixtral(), "num_local_experts", 0));
  EXPECT_NE(config_error(with(mixtral(), "num_local_experts", int64_t{1} << 30)).find("must be in [0, 2^20]"),
            std::string::npos);
  EXPECT_NE(config_error(with(mixtral(), "num_hidden_layers", int64_t{1} << 30)).find("must be in [1, 2^20]"),
            std::string::npos);
  EXPECT_NE(config_error(with(mixtral(), "router_aux_loss_coef", -1)).find("router_aux_loss_coef = -1"),
            std::string::npos);
  EXPECT_NE(config_error(with(mixtral(), "intermediate_size", int64_t{1} << 39)).find("parameters is implausible"),
            std::string::npos);
}

// Qwen3-MoE's sparse-layer rule and DeepSeek-V3's MLA, YaRN and router fields (hf_moe.h).
TEST(HfConfig, ReadsQwen3MoeAndDeepseekV3) {
  json q = llama();
  q["architectures"] = {"Qwen3MoeForCausalLM"};
  q["num_experts"] = 8, q["num_experts_per_tok"] = 2, q["moe_intermediate_size"] = 64;
  q["decoder_sparse_step"] = 2, q["mlp_only_layers"] = {3}, q["norm_topk_prob"] = true;
  const HfConfig qc = parse_hf_config(q.dump(), "m/config.json");
  EXPECT_EQ(qc.family, HfFamily::Qwen3Moe);
  EXPECT_TRUE(qc.config.qk_layernorm);
  EXPECT_EQ(qc.config.moe.layer_experts, (std::vector<int64_t>{0, 8, 0, 0}));  // (i + 1) % 2, not layer 3
  EXPECT_FALSE(qc.config.moe.router.pre_softmax);

  json d = llama();
  d["architectures"] = {"DeepseekV3ForCausalLM"};
  d["num_key_value_heads"] = 8, d["q_lora_rank"] = nullptr, d["kv_lora_rank"] = 32, d["qk_nope_head_dim"] = 16;
  d["qk_rope_head_dim"] = 8, d["v_head_dim"] = 16, d["moe_intermediate_size"] = 32, d["n_routed_experts"] = 16;
  d["n_shared_experts"] = 2, d["first_k_dense_replace"] = 1, d["n_group"] = 4, d["topk_group"] = 2;
  d["num_experts_per_tok"] = 4, d["routed_scaling_factor"] = 2.5, d["max_position_embeddings"] = 4096;
  d["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 1024},
                       {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  const model::ModelConfig c = parse_hf_config(d.dump(), "m/config.json").config;
  EXPECT_TRUE(c.mla.enabled && c.mla.yarn && c.qk_layernorm);
  EXPECT_EQ(c.mla.q_lora_rank, 0);
  EXPECT_EQ(c.mla.original_max_position_embeddings, 1024);
  EXPECT_EQ(c.moe.layer_experts, (std::vector<int64_t>{0, 16, 16, 16}));
  EXPECT_EQ(c.moe.shared_expert_intermediate_size, 64);
  EXPECT_TRUE(c.moe.expert_bias);
  EXPECT_EQ(c.moe.router.score, kernels::RouterScoreFunction::Sigmoid);
  EXPECT_EQ(c.moe.router.group_topk, 2);
  EXPECT_FLOAT_EQ(c.moe.router.scaling_factor, 2.5f);
  d["topk_group"] = 1;  // HF's group score (top 2) is not Tessera's (top 4)
  EXPECT_NE(config_error(d).find("they agree only at 2"), std::string::npos) << config_error(d);
}

TEST(HfConfig, ReadsTheBertArchitectures) {
  HfConfig b = parse_hf_config(bert("BertForPreTraining").dump(), "config.json");
  EXPECT_EQ(b.family, HfFamily::Bert);
  EXPECT_EQ(b.config.family, "bert");
  EXPECT_TRUE(b.config.apply_residual_connection_post_layernorm);
  EXPECT_TRUE(b.config.bert_binary_head);
  EXPECT_EQ(b.config.num_tokentypes, 2);
  EXPECT_EQ(b.config.kv_channels, 64);
  EXPECT_EQ(b.config.padded_vocab_size, 30522);
  EXPECT_FLOAT_EQ(b.config.norm_epsilon, 1e-12f);
  HfConfig m = parse_hf_config(bert("MegatronBertForMaskedLM").dump(), "config.json");
  EXPECT_EQ(m.family, HfFamily::MegatronBert);
  EXPECT_FALSE(m.config.apply_residual_connection_post_layernorm);
  EXPECT_FALSE(m.config.bert_binary_head);
  EXPECT_EQ(m.config.num_tokentypes, 0);
  json erf = bert("BertForMaskedLM");
  erf["hidden_act"] = "gelu";
  EXPECT_NE(config_error(erf).find("hidden_act 'gelu' is not the tanh GELU"), std::string::npos) << config_error(erf);
  json types = bert("MegatronBertForPreTraining");
  types["type_vocab_size"] = 3;
  EXPECT_NE(config_error(types).find("2 token types, not 3"), std::string::npos) << config_error(types);
  // A Tessera export records its run; the architecture must be that run's layout.
  json recorded = bert("BertForPreTraining");
  recorded["tessera_args"] = {{"model", model::to_json(m.config)}};
  EXPECT_NE(config_error(recorded).find("not its architecture"), std::string::npos) << config_error(recorded);
}

// Found while fuzzing (fuzz/hf_config_fuzzer.cc): n_head 0 divided by zero (SIGFPE), query groups 0 did
// later, and a float such as 1e300 was cast to an integer (undefined). Each is now an Error naming the file.
TEST(HfConfig, RefusesWhatTheConversionCannotTrust) {
  auto with = [](json j, const char* key, json v) {
    j[key] = std::move(v);
    return j;
  };
  EXPECT_NE(config_error(with(gpt2(), "n_head", 0)).find("must be positive"), std::string::npos);
  EXPECT_NE(config_error(with(gpt2(), "n_layer", 1e300)).find("n_layer is 1e+300, not an integer"), std::string::npos)
      << config_error(with(gpt2(), "n_layer", 1e300));
  EXPECT_NE(config_error(with(gpt2(), "n_embd", -768)).find("m/config.json: hidden size -768 and attention heads 12 "
                                                            "must be positive"),
            std::string::npos);
  EXPECT_NE(config_error(with(gpt2(), "n_positions", 0)).find("m/config.json: seq_length = 0 must be in "
                                                               "[1, 2^40]"),
            std::string::npos);
  EXPECT_NE(config_error(with(llama(), "num_key_value_heads", 0)).find("num_query_groups = 0"), std::string::npos);
  EXPECT_NE(config_error(with(llama(), "num_key_value_heads", 3)).find("divisible by the 3 query groups"),
            std::string::npos);
  EXPECT_NE(config_error(with(gpt2(), "n_layer", int64_t{1} << 40)).find("parameters is implausible"),
            std::string::npos);
  EXPECT_NE(config_error(with(gpt2(), "architectures", {"BertModel"})).find("architecture 'BertModel'"),
            std::string::npos);
  EXPECT_NE(config_error(json::array()).find("is not a JSON object"), std::string::npos);
  try {
    parse_hf_config("{\"n_layer\": ", "m/config.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("m/config.json is not valid JSON"), std::string::npos);
  }
  // A Tessera export's own configuration is checked the same way (model::config_from_json).
  json model = {{"num_layers", 1e300}};
  EXPECT_NE(config_error(with(gpt2(), "tessera_args", {{"model", model}})).find("num_layers is 1e+300, not an integer"),
            std::string::npos);
}

TEST(HfShardIndex, ListsEachShardOnceInOrder) {
  json index = {{"metadata", {{"total_size", 10}}},
                {"weight_map", {{"a", "model-00002-of-00002.safetensors"}, {"b", "model-00001-of-00002.safetensors"},
                                {"c", "model-00002-of-00002.safetensors"}}}};
  EXPECT_EQ(parse_hf_shard_index(index.dump(), "i.json"),
            (std::vector<std::string>{"model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"}));
  for (const json& bad : {json("../x"), json(".."), json("."), json(""), json(3), json(std::string("a\0b", 3))}) {
    try {
      parse_hf_shard_index(json{{"weight_map", {{"w", bad}}}}.dump(), "i.json");
      ADD_FAILURE() << bad.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("i.json maps w to a bad file name"), std::string::npos) << e.what();
    }
  }
  for (const char* bad : {"[]", "{}", "{\"weight_map\": []}", "nope"})
    EXPECT_THROW(parse_hf_shard_index(bad, "i.json"), Error) << bad;
}

}  // namespace
}  // namespace tessera::ckpt
