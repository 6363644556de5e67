#include "model/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

#include "core/check.h"

namespace tessera::model {

int64_t MoeConfig::num_moe_layers() const {
  int64_t n = 0;
  for (int64_t e : layer_experts) n += e > 0 ? 1 : 0;
  return n;
}

int64_t MoeConfig::total_experts() const {
  int64_t n = 0;
  for (int64_t e : layer_experts) n += e;
  return n;
}

int64_t MoeConfig::expert_offset(int64_t layer_number) const {
  int64_t n = 0;
  for (int64_t l = 1; l < layer_number; ++l) n += experts(l);
  return n;
}

std::vector<std::string> moe_loss_names(const MoeConfig& m) {
  std::vector<std::string> names;
  if (!m.enabled()) return names;
  if (m.load_balancing != LoadBalancing::None) names.push_back("load_balancing_loss");
  if (m.z_loss_coeff > 0) names.push_back("z_loss");
  return names;
}

namespace {
// An MLP of width f (fc1 doubled under SwiGLU) on hidden size h.
int64_t mlp_parameters(const ModelConfig& c, int64_t f) {
  const int64_t h = c.hidden_size, bias = c.add_bias_linear ? 1 : 0;
  return (c.swiglu ? 2 * f : f) * (h + bias) + h * (f + bias);
}
// The feed-forward slot of 1-based layer `layer`.
int64_t feed_forward_parameters(const ModelConfig& c, int64_t layer) {
  const MoeConfig& m = c.moe;
  const int64_t experts = m.experts(layer);
  if (experts == 0) return mlp_parameters(c, c.ffn_hidden_size);
  int64_t n = experts * mlp_parameters(c, m.ffn_hidden_size) + experts * c.hidden_size;  // experts, router
  if (m.expert_bias) n += experts;  // the router's expert bias: in the flat buffers, though not trained
  if (m.shared_expert_intermediate_size > 0) n += mlp_parameters(c, m.shared_expert_intermediate_size);
  if (m.residual) n += mlp_parameters(c, c.ffn_hidden_size) + 2 * (c.hidden_size + 1);
  return n;
}
}  // namespace

int64_t ModelConfig::parameter_count() const {
  int64_t h = hidden_size, bias = add_bias_linear ? 1 : 0;
  int64_t norm = normalization == Normalization::LayerNorm ? 2 * h : h;
  int64_t attn_out = num_attention_heads * kv_channels;
  int64_t attention = norm + qkv_size() * (h + bias) + h * (attn_out + bias) + norm;
  if (qk_layernorm) attention += 2 * (normalization == Normalization::LayerNorm ? 2 : 1) * kv_channels;  // q, k
  if (mla.enabled)
    attention = 2 * norm + mla_attention_parameters(mla, h, num_attention_heads, add_bias_linear,
                                                    normalization == Normalization::LayerNorm, qk_layernorm);
  int64_t n = num_layers * attention + norm + padded_vocab_size * h + num_tokentypes * h;
  for (int64_t layer = 1; layer <= num_layers; ++layer) n += feed_forward_parameters(*this, layer);
  if (position_embedding == PositionEmbedding::LearnedAbsolute) n += max_position_embeddings * h;
  if (untie_embeddings_and_output_weights) n += padded_vocab_size * h;
  // Each MTP module: enorm, hnorm, eh_proj (2h -> h, no bias), one layer as the last, its final norm.
  if (mtp_num_layers > 0)
    n += mtp_num_layers * (3 * norm + 2 * h * h + attention + feed_forward_parameters(*this, num_layers));
  return n;
}

namespace {
const char* load_balancing_name(LoadBalancing b) {
  return b == LoadBalancing::AuxLoss ? "aux_loss" : b == LoadBalancing::SeqAuxLoss ? "seq_aux_loss" : "none";
}

nlohmann::json moe_to_json(const MoeConfig& m) {
  return {{"layer_experts", m.layer_experts},
          {"moe_ffn_hidden_size", m.ffn_hidden_size},
          {"moe_router_topk", m.router.topk},
          {"moe_router_score_function", m.router.score == kernels::RouterScoreFunction::Sigmoid ? "sigmoid" : "softmax"},
          {"moe_router_pre_softmax", m.router.pre_softmax},
          {"moe_router_topk_scaling_factor", json_float(m.router.scaling_factor)},
          {"moe_router_num_groups", m.router.num_groups},
          {"moe_router_group_topk", m.router.group_topk},
          {"moe_router_enable_expert_bias", m.expert_bias},
          {"moe_router_load_balancing_type", load_balancing_name(m.load_balancing)},
          {"moe_aux_loss_coeff", json_float(m.aux_loss_coeff)},
          {"moe_z_loss_coeff", json_float(m.z_loss_coeff)},
          {"moe_input_jitter_eps", json_float(m.input_jitter_eps)},
          {"moe_expert_capacity_factor", m.capacity_factor},
          {"moe_token_drop_policy", m.token_drop_policy == kernels::TokenDropPolicy::Position ? "position" : "probs"},
          {"moe_pad_expert_input_to_capacity", m.pad_expert_input_to_capacity},
          {"moe_shared_expert_intermediate_size", m.shared_expert_intermediate_size},
          {"residual_moe", m.residual}};
}

MoeConfig moe_from_json(const nlohmann::json& j) {
  MoeConfig m;
  m.layer_experts = j.at("layer_experts").get<std::vector<int64_t>>();
  m.ffn_hidden_size = j.at("moe_ffn_hidden_size").get<int64_t>();
  m.router.topk = j.at("moe_router_topk").get<int64_t>();
  m.router.score = j.at("moe_router_score_function") == "sigmoid" ? kernels::RouterScoreFunction::Sigmoid
                                                                 : kernels::RouterScoreFunction::Softmax;
  m.router.pre_softmax = j.at("moe_router_pre_softmax").get<bool>();
  m.router.scaling_factor = j.at("moe_router_topk_scaling_factor").get<float>();
  // Absent from configurations saved before group-limited routing and the expert bias existed.
  m.router.num_groups = j.value("moe_router_num_groups", int64_t{0});
  m.router.group_topk = j.value("moe_router_group_topk", int64_t{0});
  m.expert_bias = j.value("moe_router_enable_expert_bias", false);
  const std::string balancing = j.at("moe_router_load_balancing_type").get<std::string>();
  m.load_balancing = balancing == "aux_loss"       ? LoadBalancing::AuxLoss
                     : balancing == "seq_aux_loss" ? LoadBalancing::SeqAuxLoss
                                                   : LoadBalancing::None;
  m.aux_loss_coeff = j.at("moe_aux_loss_coeff").get<float>();
  m.z_loss_coeff = j.at("moe_z_loss_coeff").get<float>();
  m.input_jitter_eps = j.at("moe_input_jitter_eps").get<float>();
  m.capacity_factor = j.at("moe_expert_capacity_factor").get<double>();
  m.token_drop_policy = j.at("moe_token_drop_policy") == "position" ? kernels::TokenDropPolicy::Position
                                                                   : kernels::TokenDropPolicy::Probs;
  m.pad_expert_input_to_capacity = j.at("moe_pad_expert_input_to_capacity").get<bool>();
  m.shared_expert_intermediate_size = j.at("moe_shared_expert_intermediate_size").get<int64_t>();
  m.residual = j.at("residual_moe").get<bool>();
  return m;
}
}  // namespace

double json_float(float v) {
  if (!std::isfinite(v)) return v;
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;  // the shortest form that round-trips
  return std::strtod(std::string(buf, end).c_str(), nullptr);
}

nlohmann::json to_json(const ModelConfig& c) {
  nlohmann::json j = {{"num_layers", c.num_layers},
          {"hidden_size", c.hidden_size},
          {"num_attention_heads", c.num_attention_heads},
          {"num_query_groups", c.num_query_groups},
          {"kv_channels", c.kv_channels},
          {"ffn_hidden_size", c.ffn_hidden_size},
          {"seq_length", c.seq_length},
          {"max_position_embeddings", c.max_position_embeddings},
          {"vocab_size", c.vocab_size},
          {"padded_vocab_size", c.padded_vocab_size},
          {"position_embedding_type", c.position_embedding == PositionEmbedding::Rope ? "rope" : "learned_absolute"},
          {"rotary_base", json_float(c.rotary_base)},
          {"rotary_percent", c.rotary_percent},
          {"normalization", c.normalization == Normalization::RMSNorm ? "RMSNorm" : "LayerNorm"},
          {"norm_epsilon", json_float(c.norm_epsilon)},
          {"swiglu", c.swiglu},
          {"untie_embeddings_and_output_weights", c.untie_embeddings_and_output_weights},
          {"add_bias_linear", c.add_bias_linear},
          {"hidden_dropout", json_float(c.hidden_dropout)},
          {"attention_dropout", json_float(c.attention_dropout)},
          {"init_method_std", json_float(c.init_method_std)}};
  // Written only when they differ from GPT's, so that GPT checkpoints read as before.
  if (c.family != "gpt") j["model_family"] = c.family;
  if (c.num_tokentypes > 0) j["num_tokentypes"] = c.num_tokentypes;
  if (c.apply_residual_connection_post_layernorm) j["apply_residual_connection_post_layernorm"] = true;
  if (c.family == "bert") j["bert_binary_head"] = c.bert_binary_head;
  if (c.moe.enabled()) j["moe"] = moe_to_json(c.moe);
  if (c.rope_scaling != RopeScaling::None) {
    j["rope_scaling"] = c.rope_scaling == RopeScaling::Llama3 ? "llama3" : "linear";
    j["rope_scaling_factor"] = c.rope_scaling_factor;
    if (c.rope_scaling == RopeScaling::Llama3) {
      j["rope_low_freq_factor"] = c.rope_low_freq_factor;
      j["rope_high_freq_factor"] = c.rope_high_freq_factor;
      j["rope_original_max_position"] = c.rope_original_max_position;
    }
  }
  if (c.qk_layernorm) j["qk_layernorm"] = true;
  if (c.mla.enabled) j["mla"] = mla_to_json(c.mla);
  if (c.mtp_num_layers > 0) {
    j["mtp_num_layers"] = c.mtp_num_layers;
    j["mtp_loss_scaling_factor"] = json_float(c.mtp_loss_scaling_factor);
  }
  return j;
}

namespace {
// An integer field. A float is refused: nlohmann's get<int64_t> casts it, and a cast of 1e300 is undefined.
int64_t integer(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}))
    throw Error(str_cat("model configuration: ", key, " is ", v.dump(), ", not an integer"));
  return v.get<int64_t>();
}
}  // namespace

ModelConfig config_from_json(const nlohmann::json& j) {
  ModelConfig c;
  try {
    c.num_layers = integer(j, "num_layers");
    c.hidden_size = integer(j, "hidden_size");
    c.num_attention_heads = integer(j, "num_attention_heads");
    c.num_query_groups = integer(j, "num_query_groups");
    c.kv_channels = integer(j, "kv_channels");
    c.ffn_hidden_size = integer(j, "ffn_hidden_size");
    c.seq_length = integer(j, "seq_length");
    c.max_position_embeddings = integer(j, "max_position_embeddings");
    c.vocab_size = integer(j, "vocab_size");
    c.padded_vocab_size = integer(j, "padded_vocab_size");
    c.position_embedding =
        j.at("position_embedding_type") == "rope" ? PositionEmbedding::Rope : PositionEmbedding::LearnedAbsolute;
    c.rotary_base = j.at("rotary_base").get<float>();
    c.rotary_percent = j.at("rotary_percent").get<double>();
    c.normalization = j.at("normalization") == "RMSNorm" ? Normalization::RMSNorm : Normalization::LayerNorm;
    c.norm_epsilon = j.at("norm_epsilon").get<float>();
    c.swiglu = j.at("swiglu").get<bool>();
    c.untie_embeddings_and_output_weights = j.at("untie_embeddings_and_output_weights").get<bool>();
    c.add_bias_linear = j.at("add_bias_linear").get<bool>();
    c.hidden_dropout = j.at("hidden_dropout").get<float>();
    c.attention_dropout = j.at("attention_dropout").get<float>();
    c.init_method_std = j.at("init_method_std").get<float>();
    if (j.contains("model_family")) c.family = j.at("model_family").get<std::string>();
    if (j.contains("num_tokentypes")) c.num_tokentypes = integer(j, "num_tokentypes");
    if (j.contains("apply_residual_connection_post_layernorm"))
      c.apply_residual_connection_post_layernorm = j.at("apply_residual_connection_post_layernorm").get<bool>();
    if (j.contains("bert_binary_head")) c.bert_binary_head = j.at("bert_binary_head").get<bool>();
    if (j.contains("moe")) c.moe = moe_from_json(j.at("moe"));
    if (j.contains("rope_scaling")) {
      const std::string type = j.at("rope_scaling").get<std::string>();
      if (type != "llama3" && type != "linear")
        throw Error(str_cat("model configuration: rope_scaling is \"", type, "\", not llama3 or linear"));
      c.rope_scaling = type == "llama3" ? RopeScaling::Llama3 : RopeScaling::Linear;
      c.rope_scaling_factor = j.at("rope_scaling_factor").get<double>();
      if (c.rope_scaling == RopeScaling::Llama3) {
        c.rope_low_freq_factor = j.at("rope_low_freq_factor").get<double>();
        c.rope_high_freq_factor = j.at("rope_high_freq_factor").get<double>();
        c.rope_original_max_position = integer(j, "rope_original_max_position");
      }
    }
    if (j.contains("qk_layernorm")) c.qk_layernorm = j.at("qk_layernorm").get<bool>();
    if (j.contains("mla")) c.mla = mla_from_json(j.at("mla"));
    if (j.contains("mtp_num_layers")) {
      c.mtp_num_layers = integer(j, "mtp_num_layers");
      c.mtp_loss_scaling_factor = j.at("mtp_loss_scaling_factor").get<float>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat("model configuration: ", e.what()));
  }
  validate_config(c);
  return c;
}

void validate_config(const ModelConfig& c) {
  const auto fail = [](const char* field, const auto& value, const char* rule) {
    throw Error(str_cat("model configuration: ", field, " is ", value, ", ", rule));
  };
  // A bound far above any model, so that a damaged field stops here, not as an allocation of petabytes.
  constexpr int64_t kLargest = int64_t{1} << 31;
  const auto dimension = [&](const char* field, int64_t v) {
    if (v < 1 || v > kLargest) fail(field, v, "must be between 1 and 2^31");
  };
  dimension("num_layers", c.num_layers);
  dimension("hidden_size", c.hidden_size);
  dimension("num_attention_heads", c.num_attention_heads);
  dimension("num_query_groups", c.num_query_groups);
  dimension("kv_channels", c.kv_channels);
  dimension("seq_length", c.seq_length);
  dimension("max_position_embeddings", c.max_position_embeddings);
  dimension("vocab_size", c.vocab_size);
  dimension("padded_vocab_size", c.padded_vocab_size);
  if (c.mtp_num_layers < 0 || c.mtp_num_layers > c.num_layers)
    fail("mtp_num_layers", c.mtp_num_layers, "must be between 0 and num_layers");
  if (!std::isfinite(c.mtp_loss_scaling_factor))
    fail("mtp_loss_scaling_factor", c.mtp_loss_scaling_factor, "must be finite");
  if (c.num_attention_heads % c.num_query_groups != 0)
    fail("num_query_groups", c.num_query_groups, str_cat("must divide num_attention_heads (", c.num_attention_heads, ")").c_str());
  if (c.padded_vocab_size < c.vocab_size)
    fail("padded_vocab_size", c.padded_vocab_size, str_cat("must be at least vocab_size (", c.vocab_size, ")").c_str());
  if (c.ffn_hidden_size < 0 || c.ffn_hidden_size > kLargest) fail("ffn_hidden_size", c.ffn_hidden_size, "must be between 0 and 2^31");
  const bool dense_mlp = !c.moe.enabled() || c.moe.residual ||
                         std::find(c.moe.layer_experts.begin(), c.moe.layer_experts.end(), 0) != c.moe.layer_experts.end();
  if (dense_mlp && c.ffn_hidden_size == 0) fail("ffn_hidden_size", 0, "must be positive (the model has dense MLP layers)");
  if (c.num_tokentypes < 0 || c.num_tokentypes > kLargest) fail("num_tokentypes", c.num_tokentypes, "must be between 0 and 2^31");
  if (!(std::isfinite(c.norm_epsilon) && c.norm_epsilon > 0)) fail("norm_epsilon", c.norm_epsilon, "must be a positive number");
  if (c.position_embedding == PositionEmbedding::Rope) {
    if (!(std::isfinite(c.rotary_base) && c.rotary_base > 0)) fail("rotary_base", c.rotary_base, "must be a positive number");
    if (!(c.rotary_percent > 0 && c.rotary_percent <= 1)) fail("rotary_percent", c.rotary_percent, "must be in (0, 1]");
  }
  if (c.rope_scaling != RopeScaling::None) {
    if (c.position_embedding != PositionEmbedding::Rope) fail("rope_scaling", "set", "needs rope positions");
    if (!(std::isfinite(c.rope_scaling_factor) && c.rope_scaling_factor > 0))
      fail("rope_scaling_factor", c.rope_scaling_factor, "must be a positive number");
  }
  if (c.rope_scaling == RopeScaling::Llama3) {
    if (!(std::isfinite(c.rope_low_freq_factor) && c.rope_low_freq_factor > 0))
      fail("rope_low_freq_factor", c.rope_low_freq_factor, "must be a positive number");
    // The smooth band divides by high - low: equal factors would make it 0/0.
    if (!(std::isfinite(c.rope_high_freq_factor) && c.rope_high_freq_factor > c.rope_low_freq_factor))
      fail("rope_high_freq_factor", c.rope_high_freq_factor,
           str_cat("must be greater than rope_low_freq_factor (", c.rope_low_freq_factor, ")").c_str());
    dimension("rope_original_max_position", c.rope_original_max_position);
  }
  if (c.mla.enabled) validate_mla(c.mla);
  if (!(c.hidden_dropout >= 0 && c.hidden_dropout <= 1)) fail("hidden_dropout", c.hidden_dropout, "must be in [0, 1]");
  if (!(c.attention_dropout >= 0 && c.attention_dropout <= 1))
    fail("attention_dropout", c.attention_dropout, "must be in [0, 1]");
  if (!c.moe.enabled()) return;
  const MoeConfig& m = c.moe;
  // One per layer, then one per multi-token prediction module's layer (each as the last, as Megatron).
  if (static_cast<int64_t>(m.layer_experts.size()) != c.num_layers + c.mtp_num_layers)
    fail("moe.layer_experts", str_cat(m.layer_experts.size(), " entries"),
         str_cat(c.mtp_num_layers > 0 ? "one per layer and MTP module (" : "one per layer (",
                 c.num_layers + c.mtp_num_layers, ")").c_str());
  for (int64_t e : m.layer_experts) {
    if (e < 0 || e > kLargest) fail("moe.layer_experts", str_cat("an entry of ", e), "must be between 0 and 2^31 experts");
    if (e > 0 && m.router.topk > e) fail("moe_router_topk", m.router.topk, str_cat("must not exceed a layer's experts (", e, ")").c_str());
  }
  if (m.router.topk < 1) fail("moe_router_topk", m.router.topk, "must be positive");
  if (m.expert_bias && m.router.score != kernels::RouterScoreFunction::Sigmoid)
    fail("moe_router_enable_expert_bias", "true", "needs moe_router_score_function sigmoid");
  if (m.router.grouped()) {
    const int64_t G = m.router.num_groups, g = m.router.group_topk, k = m.router.topk;
    if (G < 1 || g < 1 || g > G) fail("moe_router_group_topk", g, str_cat("must be in [1, moe_router_num_groups (", G, ")]").c_str());
    if (k % g != 0) fail("moe_router_topk", k, str_cat("must be divisible by moe_router_group_topk (", g, ")").c_str());
    for (int64_t e : m.layer_experts)
      if (e > 0 && (e % G != 0 || k / g > e / G))
        fail("moe_router_num_groups", G, str_cat("must divide a layer's ", e, " experts into groups of at least ",
                                                 k / g, " (moe_router_topk / moe_router_group_topk)").c_str());
  } else if (m.router.num_groups != 0) {
    fail("moe_router_num_groups", m.router.num_groups, "needs moe_router_group_topk");
  }
  dimension("moe_ffn_hidden_size", m.ffn_hidden_size);
  if (m.shared_expert_intermediate_size < 0 || m.shared_expert_intermediate_size > kLargest)
    fail("moe_shared_expert_intermediate_size", m.shared_expert_intermediate_size, "must be between 0 and 2^31");
}

int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, int64_t tensor_parallel) {
  int64_t multiple = divisible_by * tensor_parallel;
  return (vocab + multiple - 1) / multiple * multiple;
}

double model_flops_per_iteration(const ModelConfig& c, int64_t batch) {
  double h = static_cast<double>(c.hidden_size);
  double query_projection_ratio = static_cast<double>(c.kv_channels * c.num_attention_heads) / h;
  double gated = c.swiglu ? 1.5 : 1.0;
  double groups_ratio = static_cast<double>(c.num_query_groups) / static_cast<double>(c.num_attention_heads);
  double seq = static_cast<double>(c.seq_length);
  double layers = static_cast<double>(c.num_layers);
  // The feed-forward widths a token passes through, summed over layers: Megatron's MoE form counts a
  // layer's top-k experts and its shared expert (the router's GEMM is left out, as Megatron does).
  double ffn_widths = 0;
  const auto ffn_width = [&](int64_t layer) {
    const MoeConfig& m = c.moe;
    if (m.experts(layer) == 0) return static_cast<double>(c.ffn_hidden_size);
    return static_cast<double>(m.ffn_hidden_size * m.router.topk + m.shared_expert_intermediate_size) +
           (m.residual ? static_cast<double>(c.ffn_hidden_size) : 0.0);
  };
  for (int64_t layer = 1; layer <= c.num_layers; ++layer) ffn_widths += ffn_width(layer);
  // Multi-token prediction, as Megatron counts it: each module's layer as the last one, the logits once
  // more, and 6 x (3h + 2h^2) per token for its norms and eh_proj (added at the end).
  const double mtp = static_cast<double>(c.mtp_num_layers);
  layers += mtp;
  if (c.mtp_num_layers > 0) ffn_widths += mtp * ffn_width(c.num_layers);
  const double vocab_term = static_cast<double>(c.padded_vocab_size) * (1.0 + mtp) / (2.0 * h);
  const double mtp_glue = 6.0 * static_cast<double>(batch) * seq * mtp * (3.0 * h + 2.0 * h * h);
  if (c.mla.enabled) {
    // Megatron's MLA form per token and layer: 6 x (the projections' weights, the latent norms' rows
    // counted as Megatron does) + 6 x (heads x (q_head_dim + v_head_dim)) x seq for the scores and the
    // weighted values (no causal halving, as the dense form above).
    const MlaConfig& m = c.mla;
    const double a = static_cast<double>(c.num_attention_heads), dq = static_cast<double>(m.q_head_dim());
    const double q_term = m.q_lora_rank > 0 ? static_cast<double>(m.q_lora_rank) * (h + a * dq + 1.0) : h * a * dq;
    const double projections = q_term +
                               static_cast<double>(m.kv_lora_rank) *
                                   (h + a * static_cast<double>(m.qk_head_dim + m.v_head_dim) + 1.0) +
                               h * static_cast<double>(m.qk_pos_emb_head_dim) + a * static_cast<double>(m.v_head_dim) * h;
    const double attention = 6.0 * projections + 6.0 * a * (dq + static_cast<double>(m.v_head_dim)) * seq;
    return static_cast<double>(batch) * seq * (layers * attention + 12.0 * h * h * (ffn_widths / h * gated + vocab_term)) +
           mtp_glue;
  }
  return 12.0 * static_cast<double>(batch) * seq * h * h *
             (layers * (1.0 + groups_ratio + seq / h) * query_projection_ratio + ffn_widths / h * gated + vocab_term) +
         mtp_glue;
}

}  // namespace tessera::model
