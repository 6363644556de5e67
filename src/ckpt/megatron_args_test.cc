#include "ckpt/megatron_args.h"

#include <gtest/gtest.h>

#include "ckpt/megatron_saver.h"

#include <initializer_list>
#include <utility>

namespace tessera::ckpt {
namespace {

using SK = StateNode::Kind;

StateNode value(int64_t v) {
  StateNode n;
  n.kind = SK::Int;
  n.integer = v;
  return n;
}
StateNode value(double v) {
  StateNode n;
  n.kind = SK::Float;
  n.real = v;
  return n;
}
StateNode value(bool v) {
  StateNode n;
  n.kind = SK::Bool;
  n.boolean = v;
  return n;
}
StateNode value(const char* v) {
  StateNode n;
  n.kind = SK::String;
  n.text = v;
  return n;
}
StateNode none() { return StateNode{}; }

// An argparse.Namespace as load_torch_file gives it: an Object with the attributes as entries.
StateNode name_space(std::initializer_list<std::pair<const char*, StateNode>> attributes) {
  StateNode ns;
  ns.kind = SK::Object;
  ns.text = "argparse.Namespace";
  for (const auto& [key, v] : attributes) ns.entries.push_back({key, v});
  return ns;
}

StateNode gpt2_args() {
  return name_space({{"num_layers", value(int64_t{2})}, {"hidden_size", value(int64_t{32})},
                     {"num_attention_heads", value(int64_t{4})}, {"seq_length", value(int64_t{16})},
                     {"max_position_embeddings", value(int64_t{16})}, {"ffn_hidden_size", value(int64_t{64})},
                     {"kv_channels", value(int64_t{8})}, {"group_query_attention", value(false)},
                     {"num_query_groups", none()}, {"padded_vocab_size", value(int64_t{48})},
                     {"tokenizer_type", value("NullTokenizer")}, {"vocab_size", value(int64_t{40})},
                     {"tensor_model_parallel_size", value(int64_t{2})}, {"num_experts", none()},
                     {"layernorm_epsilon", value(1e-6)}, {"consumed_train_samples", value(int64_t{640})}});
}

TEST(MegatronArgs, GptTwoStyleWithMegatronsDefaults) {
  const MegatronArgs a = read_megatron_args(gpt2_args(), "args");
  const model::ModelConfig& c = a.config;
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_query_groups, 4);  // without group_query_attention every head is its own group
  EXPECT_EQ(c.position_embedding, model::PositionEmbedding::LearnedAbsolute);
  EXPECT_EQ(c.normalization, model::Normalization::LayerNorm);
  EXPECT_TRUE(c.add_bias_linear);
  EXPECT_FALSE(c.untie_embeddings_and_output_weights);
  EXPECT_FLOAT_EQ(c.norm_epsilon, 1e-6f);  // the older name, layernorm_epsilon
  EXPECT_EQ(c.padded_vocab_size, 48);
  EXPECT_EQ(c.vocab_size, 41);  // the NullTokenizer's ids 0..40
  EXPECT_EQ(a.tensor_parallel, 2);
  EXPECT_EQ(a.pipeline_parallel, 1);
  EXPECT_EQ(a.consumed_train_samples, 640);
  EXPECT_TRUE(a.notes.empty()) << a.notes[0];  // bias_gelu_fusion (default on) is the tanh GELU
}

TEST(MegatronArgs, LlamaStyle) {
  StateNode ns = gpt2_args();
  for (auto& [key, v] : std::initializer_list<std::pair<const char*, StateNode>>{
           {"group_query_attention", value(true)}, {"num_query_groups", value(int64_t{2})},
           {"position_embedding_type", value("rope")}, {"rotary_base", value(int64_t{500000})},
           {"normalization", value("RMSNorm")}, {"norm_epsilon", value(1e-5)}, {"swiglu", value(true)},
           {"add_bias_linear", value(false)}, {"untie_embeddings_and_output_weights", value(true)}})
    ns.entries.push_back({key, v});  // a later entry wins, as find() reads from the end
  const model::ModelConfig c = read_megatron_args(ns, "args").config;
  EXPECT_EQ(c.num_query_groups, 2);
  EXPECT_EQ(c.position_embedding, model::PositionEmbedding::Rope);
  EXPECT_FLOAT_EQ(c.rotary_base, 500000.0f);
  EXPECT_EQ(c.normalization, model::Normalization::RMSNorm);
  EXPECT_FLOAT_EQ(c.norm_epsilon, 1e-5f);  // norm_epsilon before layernorm_epsilon
  EXPECT_TRUE(c.swiglu);
  EXPECT_FALSE(c.add_bias_linear);
  EXPECT_TRUE(c.untie_embeddings_and_output_weights);
}

// Megatron's RoPE scalings: Llama 3.x's (its factor, default 8) or linear (the interpolation factor).
TEST(MegatronArgs, RopeScaling) {
  StateNode ns = gpt2_args();
  ns.entries.push_back({"position_embedding_type", value("rope")});
  ns.entries.push_back({"use_rope_scaling", value(true)});
  model::ModelConfig c = read_megatron_args(ns, "args").config;
  EXPECT_EQ(c.rope_scaling, model::RopeScaling::Llama3);
  EXPECT_EQ(c.rope_scaling_factor, 8.0);
  ns.entries.push_back({"rope_scaling_factor", value(32.0)});
  EXPECT_EQ(read_megatron_args(ns, "args").config.rope_scaling_factor, 32.0);
  ns.entries.push_back({"use_rope_scaling", value(false)});
  ns.entries.push_back({"rotary_seq_len_interpolation_factor", value(int64_t{4})});
  c = read_megatron_args(ns, "args").config;
  EXPECT_EQ(c.rope_scaling, model::RopeScaling::Linear);
  EXPECT_EQ(c.rope_scaling_factor, 4.0);
  ns.entries.push_back({"use_rope_scaling", value(true)});
  EXPECT_THROW(read_megatron_args(ns, "args"), Error);  // both
}

void expect_refused(const char* key, StateNode v, const std::string& message) {
  StateNode ns = gpt2_args();
  ns.entries.push_back({key, std::move(v)});
  try {
    read_megatron_args(ns, "ckpt.pt: args");
    ADD_FAILURE() << key << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(MegatronArgs, RefusesWhatTesserasGptCannotCompute) {
  expect_refused("qk_layernorm", value(true), "args.qk_layernorm set");
  expect_refused("apply_layernorm_1p", value(true), "args.apply_layernorm_1p set");
  expect_refused("squared_relu", value(true), "args.squared_relu set");
  expect_refused("normalization", value("LayerNorm1P"), "args.normalization is 'LayerNorm1P'");
  expect_refused("position_embedding_type", value("yarn"), "args.position_embedding_type is 'yarn'");
  expect_refused("num_layers", value("two"), "args.num_layers is a str, not an integer");
  StateNode rope = gpt2_args();
  rope.entries.push_back({"position_embedding_type", value("rope")});
  rope.entries.push_back({"rotary_interleaved", value(true)});
  EXPECT_THROW(read_megatron_args(rope, "args"), Error);
}

TEST(MegatronArgs, MixtureOfExperts) {
  StateNode ns = gpt2_args();
  for (const auto& [key, v] : {std::pair{"num_experts", value(int64_t{4})}, std::pair{"moe_router_topk", value(int64_t{1})},
                               std::pair{"moe_ffn_hidden_size", value(int64_t{16})},
                               std::pair{"expert_model_parallel_size", value(int64_t{2})},
                               std::pair{"moe_router_load_balancing_type", value("none")}})
    ns.entries.push_back({key, v});
  StateNode freq;  // layer 1 only: Megatron's list form
  freq.kind = SK::List;
  freq.items = {value(int64_t{0}), value(int64_t{1})};
  ns.entries.push_back({"moe_layer_freq", freq});
  const MegatronArgs a = read_megatron_args(ns, "args");
  EXPECT_EQ(a.config.moe.layer_experts, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(a.config.moe.ffn_hidden_size, 16);
  EXPECT_EQ(a.config.moe.router.topk, 1);
  EXPECT_EQ(a.config.moe.load_balancing, model::LoadBalancing::None);
  EXPECT_EQ(a.expert_parallel, 2);

  // DeepSeek-V3's parts: a shared expert, MTP modules, multi-latent attention with its latents' norms.
  for (const auto& [key, v] : {std::pair{"moe_shared_expert_intermediate_size", value(int64_t{32})},
                               std::pair{"mtp_num_layers", value(int64_t{1})},
                               std::pair{"multi_latent_attention", value(true)}, std::pair{"qk_layernorm", value(true)},
                               std::pair{"q_lora_rank", value(int64_t{24})}, std::pair{"kv_lora_rank", value(int64_t{16})}})
    ns.entries.push_back({key, v});
  const MegatronArgs d = read_megatron_args(ns, "args");
  EXPECT_EQ(d.config.moe.shared_expert_intermediate_size, 32);
  EXPECT_EQ(d.config.mtp_num_layers, 1);
  EXPECT_TRUE(d.config.mla.enabled && d.config.mla.yarn && d.config.qk_layernorm);
  EXPECT_EQ(d.config.mla.q_lora_rank, 24);
  EXPECT_EQ(d.config.mla.kv_lora_rank, 16);
}

// The savers' moe_layer_freq (Megatron's interval where it gives the pattern, else the list) and
// Megatron-Core's torch_dist rule that follows from it: layers stacked for a dense model and for
// moe_layer_freq 1, one key per layer for a list or an interval above 1.
TEST(MegatronArgs, MoeLayerFreqIsWrittenAsAnIntervalWhereMegatronsIntGivesThePattern) {
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> cases = {
      {{4, 4, 4, 4}, 1}, {{4, 0, 4, 0}, 2}, {{4, 0, 0, 4, 0, 0}, 3}, {{4, 0, 0, 0}, 4}, {{4}, 1},
      {{0, 4, 4, 4}, 0}, {{4, 4, 0, 4}, 0}, {{4, 0, 4, 4}, 0}, {{4, 0, 0, 4, 4}, 0}, {{4, 0, 0, 4, 0}, 3}};
  for (const auto& [experts, every] : cases) {
    model::ModelConfig c;
    c.num_layers = static_cast<int64_t>(experts.size());
    c.moe.layer_experts = experts;
    const std::string what = ::testing::PrintToString(experts);
    EXPECT_EQ(megatron_moe_interval(c.moe, c.num_layers), every) << what;
    EXPECT_EQ(megatron_stacks_layers(c), every == 1) << what;
    if (every == 0) continue;
    // Megatron's int form read back (Tessera's reader, as Megatron's layer specs expand it): the same layers.
    StateNode ns = gpt2_args();
    for (auto& [key, v] : ns.entries) {
      if (key == "num_layers") v = value(c.num_layers);
      if (key == "num_experts") v = value(int64_t{4});
    }
    ns.entries.push_back({"moe_layer_freq", value(every)});
    ns.entries.push_back({"moe_router_load_balancing_type", value("none")});
    EXPECT_EQ(read_megatron_args(ns, "args").config.moe.layer_experts, experts) << what;
  }
  // An MTP module's layer follows the decoder's (with the last layer's experts): not part of the pattern.
  model::ModelConfig c;
  c.num_layers = 2;
  c.moe.layer_experts = {4, 4, 4};
  EXPECT_EQ(megatron_moe_interval(c.moe, c.num_layers), 1);
  EXPECT_TRUE(megatron_stacks_layers(model::ModelConfig{}));  // a dense model
}

TEST(MegatronArgs, ExactGeluIsANote) {
  StateNode ns = gpt2_args();
  ns.entries.push_back({"bias_gelu_fusion", value(false)});
  const MegatronArgs a = read_megatron_args(ns, "args");
  ASSERT_EQ(a.notes.size(), 1u);
  EXPECT_NE(a.notes[0].find("erf"), std::string::npos);
}

TEST(MegatronArgs, MissingSizeOrNotANamespace) {
  StateNode ns = name_space({{"hidden_size", value(int64_t{32})}, {"num_attention_heads", value(int64_t{4})}});
  EXPECT_THROW(read_megatron_args(ns, "args"), Error);
  EXPECT_THROW(read_megatron_args(value(int64_t{3}), "args"), Error);
}

}  // namespace
}  // namespace tessera::ckpt
