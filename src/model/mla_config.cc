#include "model/mla_config.h"

#include <cmath>

#include "core/check.h"

namespace tessera::model {

kernels::math::RopeScaling MlaConfig::rope_scaling() const {
  kernels::math::RopeScaling s;
  if (!yarn) return s;
  s.type = kernels::math::RopeScalingType::kYarn;
  s.factor = rotary_scaling_factor;
  s.original_max_position = static_cast<double>(original_max_position_embeddings);
  s.beta_fast = beta_fast;
  s.beta_slow = beta_slow;
  return s;
}

double MlaConfig::rope_mscale() const {
  if (!yarn) return 1.0;
  return kernels::math::yarn_get_mscale(rotary_scaling_factor, mscale) /
         kernels::math::yarn_get_mscale(rotary_scaling_factor, mscale_all_dim);
}

double MlaConfig::softmax_scale() const {
  const double m = kernels::math::yarn_get_mscale(rotary_scaling_factor, mscale_all_dim);
  return m * m / std::sqrt(static_cast<double>(q_head_dim()));
}

nlohmann::json mla_to_json(const MlaConfig& m) {
  return {{"q_lora_rank", m.q_lora_rank},
          {"kv_lora_rank", m.kv_lora_rank},
          {"qk_head_dim", m.qk_head_dim},
          {"qk_pos_emb_head_dim", m.qk_pos_emb_head_dim},
          {"v_head_dim", m.v_head_dim},
          {"rope_type", m.yarn ? "yarn" : "rope"},
          {"rotary_scaling_factor", m.rotary_scaling_factor},
          {"mscale", m.mscale},
          {"mscale_all_dim", m.mscale_all_dim},
          {"beta_fast", m.beta_fast},
          {"beta_slow", m.beta_slow},
          {"original_max_position_embeddings", m.original_max_position_embeddings}};
}

MlaConfig mla_from_json(const nlohmann::json& j) {
  MlaConfig m;
  m.enabled = true;
  const auto integer = [&](const char* key) {
    const nlohmann::json& v = j.at(key);
    if (!v.is_number_integer()) throw Error(str_cat("model configuration: mla.", key, " is ", v.dump(), ", not an integer"));
    return v.get<int64_t>();
  };
  m.q_lora_rank = integer("q_lora_rank");
  m.kv_lora_rank = integer("kv_lora_rank");
  m.qk_head_dim = integer("qk_head_dim");
  m.qk_pos_emb_head_dim = integer("qk_pos_emb_head_dim");
  m.v_head_dim = integer("v_head_dim");
  const std::string type = j.at("rope_type").get<std::string>();
  if (type != "yarn" && type != "rope")
    throw Error(str_cat("model configuration: mla.rope_type is \"", type, "\", not yarn or rope"));
  m.yarn = type == "yarn";
  m.rotary_scaling_factor = j.at("rotary_scaling_factor").get<double>();
  m.mscale = j.at("mscale").get<double>();
  m.mscale_all_dim = j.at("mscale_all_dim").get<double>();
  m.beta_fast = j.at("beta_fast").get<double>();
  m.beta_slow = j.at("beta_slow").get<double>();
  m.original_max_position_embeddings = integer("original_max_position_embeddings");
  return m;
}

void validate_mla(const MlaConfig& m) {
  const auto fail = [](const char* field, const auto& value, const char* rule) {
    throw Error(str_cat("model configuration: mla.", field, " is ", value, ", ", rule));
  };
  constexpr int64_t kLargest = int64_t{1} << 31;
  const auto dimension = [&](const char* field, int64_t v) {
    if (v < 1 || v > kLargest) fail(field, v, "must be between 1 and 2^31");
  };
  if (m.q_lora_rank < 0 || m.q_lora_rank > kLargest) fail("q_lora_rank", m.q_lora_rank, "must be between 0 and 2^31");
  dimension("kv_lora_rank", m.kv_lora_rank);
  dimension("qk_head_dim", m.qk_head_dim);
  dimension("qk_pos_emb_head_dim", m.qk_pos_emb_head_dim);
  dimension("v_head_dim", m.v_head_dim);
  if (m.qk_pos_emb_head_dim % 2 != 0) fail("qk_pos_emb_head_dim", m.qk_pos_emb_head_dim, "must be even (RoPE pairs)");
  const auto positive = [&](const char* field, double v) {
    if (!(std::isfinite(v) && v > 0)) fail(field, v, "must be a positive number");
  };
  positive("rotary_scaling_factor", m.rotary_scaling_factor);
  positive("beta_fast", m.beta_fast);
  positive("beta_slow", m.beta_slow);
  if (!std::isfinite(m.mscale)) fail("mscale", m.mscale, "must be finite");
  if (!std::isfinite(m.mscale_all_dim)) fail("mscale_all_dim", m.mscale_all_dim, "must be finite");
  dimension("original_max_position_embeddings", m.original_max_position_embeddings);
  if (!(std::isfinite(m.rope_mscale()) && m.rope_mscale() > 0 && m.softmax_scale() > 0))
    fail("mscale_all_dim", m.mscale_all_dim, "gives a non-positive YaRN mscale");
}

int64_t mla_attention_parameters(const MlaConfig& m, int64_t hidden, int64_t heads, bool bias, bool layernorm_norms,
                                 bool qk_layernorm) {
  // The down and up projections have no biases (Megatron's bias=False); linear_proj has one with add_bias_linear.
  const int64_t norm = layernorm_norms ? 2 : 1;
  int64_t n = 0;
  if (m.q_lora_rank > 0) {
    n += m.q_lora_rank * hidden + heads * m.q_head_dim() * m.q_lora_rank;
    if (qk_layernorm) n += norm * m.q_lora_rank;
  } else {
    n += heads * m.q_head_dim() * hidden;
  }
  n += (m.kv_lora_rank + m.qk_pos_emb_head_dim) * hidden + heads * (m.qk_head_dim + m.v_head_dim) * m.kv_lora_rank;
  if (qk_layernorm) n += norm * m.kv_lora_rank;
  n += hidden * heads * m.v_head_dim + (bias ? hidden : 0);  // linear_proj
  return n;
}

}  // namespace tessera::model
