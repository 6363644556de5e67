// config.json of Qwen3MoeForCausalLM and DeepseekV3ForCausalLM <-> Tessera's MoE and MLA configuration
// (hf_moe.h). Defaults are those of transformers' Qwen3MoeConfig and DeepseekV3Config.
#include <cmath>
#include <string>

#include "ckpt/hf_moe.h"
#include "core/check.h"

namespace tessera::ckpt {
using nlohmann::json;

namespace {

int64_t int_or(const json& hf, const char* key, int64_t fallback) {
  return hf.contains(key) && !hf[key].is_null() ? hf_int_field(hf, key) : fallback;
}

// layer_experts needs one entry per layer: bound the count before allocating (check_config does the rest).
void check_layers(const model::ModelConfig& c) {
  TESSERA_CHECK(c.num_layers >= 1 && c.num_layers <= (int64_t{1} << 20), "convert: num_hidden_layers = ",
                c.num_layers, " must be in [1, 2^20]");
}

// DeepSeek's YaRN rope_scaling into Tessera's MLA RoPE. transformers' YaRN takes the factor from
// max_position_embeddings / original_max_position_embeddings when the latter is given, DeepSeek's own
// code from "factor": a config where they differ is ambiguous, and refused. HF's attention factor on cos
// and sin is mscale(factor, mscale) / mscale(factor, mscale_all_dim) only when both are set, else
// mscale(factor) (mscale 1), which is Tessera's with mscale 1 and mscale_all_dim 0 for the rotation; the
// softmax scale takes mscale_all_dim on its own, so a zero mscale beside a non-zero mscale_all_dim has no
// Tessera form.
void read_yarn(const json& hf, model::ModelConfig& c) {
  model::MlaConfig& m = c.mla;
  m.yarn = false;  // no rope_scaling: plain RoPE
  if (!hf.contains("rope_scaling") || hf["rope_scaling"].is_null()) return;
  const json& s = hf["rope_scaling"];
  TESSERA_CHECK(s.is_object(), "convert: rope_scaling is ", s.dump(), ", not an object");
  const std::string type = s.value("rope_type", s.value("type", std::string("default")));
  if (type == "default") return;
  TESSERA_CHECK(type == "yarn", "convert: DeepSeek rope_scaling type '", type,
                "' is not supported (Tessera's multi-latent attention has yarn)");
  TESSERA_CHECK(!s.contains("attention_factor") || s["attention_factor"].is_null(),
                "convert: rope_scaling attention_factor is not supported (Tessera derives it from mscale)");
  m.yarn = true;
  m.rotary_scaling_factor = s.at("factor").get<double>();
  m.beta_fast = s.value("beta_fast", 32.0);
  m.beta_slow = s.value("beta_slow", 1.0);
  m.original_max_position_embeddings = c.max_position_embeddings;
  if (s.contains("original_max_position_embeddings")) {
    m.original_max_position_embeddings = hf_int_field(s, "original_max_position_embeddings");
    const double ratio = static_cast<double>(c.max_position_embeddings) / m.original_max_position_embeddings;
    TESSERA_CHECK(std::abs(ratio - m.rotary_scaling_factor) <= 1e-9 * m.rotary_scaling_factor,
                  "convert: rope_scaling factor ", m.rotary_scaling_factor, " is not max_position_embeddings / "
                  "original_max_position_embeddings = ", ratio, " (transformers would use the ratio, DeepSeek the factor)");
  }
  const double mscale = s.value("mscale", 1.0), all_dim = s.value("mscale_all_dim", 0.0);
  TESSERA_CHECK(mscale != 0 || all_dim == 0, "convert: rope_scaling mscale 0 with mscale_all_dim ", all_dim,
                " has no Tessera equivalent");
  m.mscale = all_dim != 0 ? mscale : 1.0;
  m.mscale_all_dim = all_dim;
}

}  // namespace

void read_qwen3_moe_config(const json& hf, model::ModelConfig& c) {
  check_layers(c);
  const int64_t experts = int_or(hf, "num_experts", 128);
  TESSERA_CHECK(experts >= 1, "convert: Qwen3MoE num_experts = ", experts,
                ": a model without experts is a Qwen3ForCausalLM");
  const int64_t step = int_or(hf, "decoder_sparse_step", 1);
  TESSERA_CHECK(step >= 1, "convert: Qwen3MoE decoder_sparse_step = ", step, " must be positive");
  c.moe.layer_experts.assign(static_cast<size_t>(c.num_layers), 0);
  for (int64_t i = 0; i < c.num_layers; ++i)
    if ((i + 1) % step == 0) c.moe.layer_experts[static_cast<size_t>(i)] = experts;
  const json dense = hf.value("mlp_only_layers", json::array());
  TESSERA_CHECK(dense.is_array(), "convert: Qwen3MoE mlp_only_layers is ", dense.dump(), ", not a list");
  for (const json& i : dense) {
    TESSERA_CHECK(i.is_number_integer() && i.get<int64_t>() >= 0 && i.get<int64_t>() < c.num_layers,
                  "convert: Qwen3MoE mlp_only_layers holds ", i.dump(), ", not a layer index below ", c.num_layers);
    c.moe.layer_experts[i.get<size_t>()] = 0;
  }
  c.moe.ffn_hidden_size = int_or(hf, "moe_intermediate_size", 768);
  c.moe.router.topk = int_or(hf, "num_experts_per_tok", 8);
  // Softmax over all experts, then the top k: renormalised (Tessera's default) or not (pre-softmax).
  c.moe.router.pre_softmax = !hf.value("norm_topk_prob", false);
  c.moe.aux_loss_coeff = hf.value("router_aux_loss_coef", 0.001f);
}

void read_deepseek_config(const json& hf, model::ModelConfig& c, bool v2) {
  check_layers(c);
  const char* family = v2 ? "DeepSeek-V2" : "DeepSeek-V3";
  TESSERA_CHECK(!hf.value("attention_bias", false),
                "convert: DeepSeek attention_bias; Tessera's MLA has biases only with --add-bias-linear on every layer");
  TESSERA_CHECK(hf.value("hidden_act", std::string("silu")) == "silu", "convert: DeepSeek hidden_act '",
                hf.value("hidden_act", std::string()), "' is not silu");
  TESSERA_CHECK(hf.value("rope_interleave", true), "convert: DeepSeek rope_interleave false (rotate-half RoPE "
                "weights) is not supported; Tessera's MLA takes the interleaved weights DeepSeek publishes");
  // The routing fields (the remote-code config's scoring_func too), where present, must be the version's.
  const std::string scoring = hf.value("scoring_func", std::string(v2 ? "softmax" : "sigmoid"));
  const std::string method = hf.value("topk_method", std::string(v2 ? "greedy" : "noaux_tc"));
  TESSERA_CHECK(scoring == (v2 ? "softmax" : "sigmoid"), "convert: ", family, " scoring_func '", scoring,
                "' is not ", v2 ? "softmax" : "sigmoid");
  TESSERA_CHECK(v2 ? method == "greedy" || method == "group_limited_greedy" : method == "noaux_tc", "convert: ", family,
                " topk_method '", method, "' is not ", v2 ? "greedy or group_limited_greedy" : "noaux_tc");
  // HF builds q_a_layernorm and kv_a_layernorm with RMSNorm's default epsilon, Tessera every norm with one.
  TESSERA_CHECK(c.norm_epsilon == 1e-6f, "convert: DeepSeek rms_norm_eps ", c.norm_epsilon, " is not the 1e-6 of "
                "its latent norms (q_a_layernorm, kv_a_layernorm); Tessera has one epsilon for every norm");
  model::MlaConfig& m = c.mla;
  m.enabled = true;
  m.q_lora_rank = int_or(hf, "q_lora_rank", 0);  // null: q_proj, no query compression
  m.kv_lora_rank = hf_int_field(hf, "kv_lora_rank");
  m.qk_head_dim = hf_int_field(hf, "qk_nope_head_dim");
  m.qk_pos_emb_head_dim = hf_int_field(hf, "qk_rope_head_dim");
  m.v_head_dim = hf_int_field(hf, "v_head_dim");
  c.qk_layernorm = true;  // q_a_layernorm and kv_a_layernorm (Megatron's q_layernorm, kv_layernorm)
  c.num_query_groups = c.num_attention_heads;
  c.kv_channels = m.v_head_dim;
  read_yarn(hf, c);

  const int64_t experts = int_or(hf, "n_routed_experts", v2 ? 64 : 256);
  const int64_t first_dense = int_or(hf, "first_k_dense_replace", v2 ? 0 : 3);
  const int64_t freq = int_or(hf, "moe_layer_freq", 1);  // DeepSeek's remote code: i >= k and i % freq == 0
  TESSERA_CHECK(experts >= 1 && first_dense >= 0 && freq >= 1, "convert: DeepSeek n_routed_experts = ", experts,
                ", first_k_dense_replace = ", first_dense, ", moe_layer_freq = ", freq, " (need >= 1, >= 0, >= 1)");
  c.moe.layer_experts.assign(static_cast<size_t>(c.num_layers), 0);
  for (int64_t i = first_dense; i < c.num_layers; ++i)
    if (i % freq == 0) c.moe.layer_experts[static_cast<size_t>(i)] = experts;
  // The MTP modules, stored as layers num_hidden_layers, ...: each a layer with the last layer's experts.
  c.mtp_num_layers = int_or(hf, "num_nextn_predict_layers", 0);
  TESSERA_CHECK(!v2 || c.mtp_num_layers == 0, "convert: DeepSeek-V2 has no MTP layers (num_nextn_predict_layers)");
  TESSERA_CHECK(c.mtp_num_layers >= 0 && c.mtp_num_layers <= 64, "convert: DeepSeek num_nextn_predict_layers = ",
                c.mtp_num_layers, " must be in [0, 64]");
  for (int64_t k = 0; k < c.mtp_num_layers; ++k) c.moe.layer_experts.push_back(c.moe.layer_experts.back());
  c.moe.ffn_hidden_size = hf_int_field(hf, "moe_intermediate_size");
  c.moe.shared_expert_intermediate_size = int_or(hf, "n_shared_experts", v2 ? 2 : 0) * c.moe.ffn_hidden_size;
  kernels::TopkRouterOptions& r = c.moe.router;
  c.moe.load_balancing = model::LoadBalancing::None;  // V3 is aux-loss-free; V2's aux losses are training-only
  if (v2) {
    // DeepseekV2Moe: softmax over all experts, the top k (within the topk_group groups of highest maximum
    // under group_limited_greedy), not renormalised, times routed_scaling_factor: --moe-router-pre-softmax.
    TESSERA_CHECK(hf.contains("num_experts_per_tok") && !hf["num_experts_per_tok"].is_null(),
                  "convert: DeepSeek-V2 num_experts_per_tok null (a dense model) is not supported");
    r.topk = hf_int_field(hf, "num_experts_per_tok");
    r.pre_softmax = true;
    r.scaling_factor = hf.value("routed_scaling_factor", 1.0f);
    // transformers' DeepseekV2Moe ignores norm_topk_prob, DeepSeek's code renormalises: ambiguous.
    TESSERA_CHECK(!hf.value("norm_topk_prob", false) || r.topk == 1, "convert: DeepSeek-V2 norm_topk_prob true "
                  "(transformers ignores it, DeepSeek's code renormalises) is not supported");
    if (method == "group_limited_greedy") {
      const int64_t groups = hf_int_field(hf, "n_group"), group_topk = hf_int_field(hf, "topk_group");
      TESSERA_CHECK(groups >= 1 && group_topk >= 1 && group_topk <= groups && experts % groups == 0, "convert: "
                    "DeepSeek-V2 n_group = ", groups, " and topk_group = ", group_topk, " must divide the ", experts,
                    " experts into groups and keep between 1 and n_group of them");
      if (group_topk < groups) {
        // V2 scores a group by its best expert, Tessera by its top k / topk_group.
        TESSERA_CHECK(r.topk == group_topk, "convert: DeepSeek-V2 scores a group by its best expert, Tessera by its "
                      "num_experts_per_tok / topk_group = ", r.topk, " / ", group_topk, " best; they agree only at 1");
        r.num_groups = groups;
        r.group_topk = group_topk;
      }
    }
    return;
  }
  r.topk = int_or(hf, "num_experts_per_tok", 8);
  r.score = kernels::RouterScoreFunction::Sigmoid;
  r.scaling_factor = hf.value("routed_scaling_factor", 2.5f);
  TESSERA_CHECK(hf.value("norm_topk_prob", true) || r.topk == 1, "convert: DeepSeek-V3 norm_topk_prob false; "
                "Tessera's sigmoid routing renormalises the chosen scores");
  c.moe.expert_bias = true;  // e_score_correction_bias
  const int64_t groups = int_or(hf, "n_group", 8), group_topk = int_or(hf, "topk_group", 4);
  TESSERA_CHECK(groups >= 1 && group_topk >= 1 && group_topk <= groups && experts % groups == 0, "convert: DeepSeek "
                "n_group = ", groups, " and topk_group = ", group_topk, " must divide the ", experts,
                " experts into groups and keep between 1 and n_group of them");
  if (group_topk < groups) {
    // HF scores a group by its 2 best experts, Megatron (and Tessera) by its top k / topk_group.
    TESSERA_CHECK(r.topk == 2 * group_topk, "convert: DeepSeek-V3 scores a group by its 2 best experts, Tessera by "
                  "num_experts_per_tok / topk_group = ", r.topk, " / ", group_topk, "; they agree only at 2");
    r.num_groups = groups;
    r.group_topk = group_topk;
  }
}

std::string not_deepseek(const model::ModelConfig& c, bool v2) {
  const model::MoeConfig& m = c.moe;
  const model::MlaConfig& a = c.mla;
  if (!m.enabled()) return "it has no experts";
  if (!c.qk_layernorm) return "its latents have no norms (--qk-layernorm: q_a_layernorm, kv_a_layernorm)";
  if (c.norm_epsilon != 1e-6f)
    return str_cat("its norm epsilon ", c.norm_epsilon, " is not the 1e-6 of DeepSeek's latent norms (--norm-epsilon)");
  // Dense layers first (first_k_dense_replace), then every layer with the same experts.
  int64_t first_moe = -1;
  for (size_t i = 0; i < m.layer_experts.size(); ++i) {
    if (m.layer_experts[i] == 0 && first_moe >= 0)
      return str_cat("layer ", i + 1, " is dense after a MoE layer (DeepSeek's dense layers come first)");
    if (m.layer_experts[i] != 0 && first_moe < 0) first_moe = static_cast<int64_t>(i);
    if (m.layer_experts[i] != 0 && m.layer_experts[i] != m.layer_experts[static_cast<size_t>(first_moe)])
      return str_cat("layer ", i + 1, " has ", m.layer_experts[i], " experts, an earlier one ",
                     m.layer_experts[static_cast<size_t>(first_moe)], " (a pyramid)");
  }
  if (first_moe < 0 || first_moe >= c.num_layers) return "no layer has experts";
  if (v2) {
    if (!m.router.pre_softmax && m.router.topk > 1)
      return "its top-k probabilities are renormalised (DeepSeek-V2's are not: --moe-router-pre-softmax)";
    if (m.router.grouped() && m.router.topk != m.router.group_topk)
      return str_cat("DeepSeek-V2 scores a group by its best expert, this model by its --moe-router-topk / "
                     "--moe-router-group-topk = ", m.router.topk / m.router.group_topk, " best");
    if (c.mtp_num_layers > 0) return "it has MTP modules (DeepseekV3ForCausalLM has them, with sigmoid routing)";
  } else {
    if (!m.expert_bias) return "it has no expert bias (--moe-router-enable-expert-bias: e_score_correction_bias)";
    if (m.router.grouped() && m.router.topk != 2 * m.router.group_topk)
      return str_cat("HF scores a group by its 2 best experts, this model by --moe-router-topk / "
                     "--moe-router-group-topk = ", m.router.topk / m.router.group_topk);
  }
  if (m.shared_expert_intermediate_size == 0 || m.shared_expert_intermediate_size % m.ffn_hidden_size != 0)
    return "its shared expert is not n_shared_experts experts' width (--moe-shared-expert-intermediate-size)";
  if (m.residual) return "it is a residual MoE (--mlp-type residual)";
  if (!m.dropless()) return "it drops tokens over capacity (--moe-expert-capacity-factor)";
  if (a.yarn) {
    const double ratio = static_cast<double>(c.max_position_embeddings) / a.original_max_position_embeddings;
    if (std::abs(ratio - a.rotary_scaling_factor) > 1e-9 * a.rotary_scaling_factor)
      return str_cat("--rotary-scaling-factor ", a.rotary_scaling_factor, " is not --max-position-embeddings / "
                     "--yarn-original-max-position-embeddings = ", ratio, " (transformers takes the ratio)");
    // HF applies mscale / mscale_all_dim to cos and sin only when both are set, else mscale 1.
    if ((a.mscale == 0) != (a.mscale_all_dim == 0) && !(a.mscale == 1 && a.mscale_all_dim == 0))
      return str_cat("--mscale ", a.mscale, " with --mscale-all-dim ", a.mscale_all_dim,
                     " has no HF form (both set, or mscale 1 and mscale_all_dim 0)");
  }
  return "";
}

json deepseek_config(const model::ModelConfig& c, json llama, bool v2) {
  const model::MoeConfig& m = c.moe;
  const model::MlaConfig& a = c.mla;
  for (const char* k : {"head_dim", "attention_bias", "mlp_bias", "rope_scaling"}) llama.erase(k);
  llama["architectures"] = {v2 ? "DeepseekV2ForCausalLM" : "DeepseekV3ForCausalLM"};
  llama["model_type"] = v2 ? "deepseek_v2" : "deepseek_v3";
  llama["q_lora_rank"] = a.q_lora_rank > 0 ? json(a.q_lora_rank) : json();
  llama["kv_lora_rank"] = a.kv_lora_rank;
  llama["qk_nope_head_dim"] = a.qk_head_dim;
  llama["qk_rope_head_dim"] = a.qk_pos_emb_head_dim;
  llama["head_dim"] = a.qk_pos_emb_head_dim;  // DeepseekV3Config's: the rotary part's
  llama["v_head_dim"] = a.v_head_dim;
  llama["rope_interleave"] = true;
  llama["attention_bias"] = false;
  llama["rope_scaling"] = json();
  if (a.yarn)
    llama["rope_scaling"] = {{"type", "yarn"}, {"rope_type", "yarn"}, {"factor", a.rotary_scaling_factor},
                             {"original_max_position_embeddings", a.original_max_position_embeddings},
                             {"beta_fast", a.beta_fast}, {"beta_slow", a.beta_slow}, {"mscale", a.mscale},
                             {"mscale_all_dim", a.mscale_all_dim}};
  int64_t first_dense = 0;
  while (m.layer_experts[static_cast<size_t>(first_dense)] == 0) ++first_dense;
  const int64_t experts = m.layer_experts[static_cast<size_t>(first_dense)];
  llama["first_k_dense_replace"] = first_dense;
  llama["moe_layer_freq"] = 1;
  llama["n_routed_experts"] = experts;
  llama["moe_intermediate_size"] = m.ffn_hidden_size;
  llama["n_shared_experts"] = m.shared_expert_intermediate_size / m.ffn_hidden_size;
  llama["num_experts_per_tok"] = m.router.topk;
  llama["n_group"] = m.router.grouped() ? m.router.num_groups : 1;
  llama["topk_group"] = m.router.grouped() ? m.router.group_topk : 1;
  llama["routed_scaling_factor"] = model::json_float(m.router.scaling_factor);
  if (v2) {
    llama["norm_topk_prob"] = false;
    llama["scoring_func"] = "softmax";
    llama["topk_method"] = m.router.grouped() ? "group_limited_greedy" : "greedy";
    return llama;
  }
  llama["norm_topk_prob"] = true;
  llama["scoring_func"] = "sigmoid";
  llama["topk_method"] = "noaux_tc";
  llama["num_nextn_predict_layers"] = c.mtp_num_layers;
  return llama;
}

std::string not_qwen3_moe(const model::ModelConfig& c) {
  const model::MoeConfig& m = c.moe;
  if (c.position_embedding != model::PositionEmbedding::Rope || c.normalization != model::Normalization::RMSNorm ||
      !c.swiglu)
    return "it is not Llama style (--position-embedding-type rope, --normalization RMSNorm, --swiglu)";
  if (c.add_bias_linear) return "it has biases (--disable-bias-linear)";
  int64_t experts = 0;
  for (size_t i = 0; i < m.layer_experts.size(); ++i) {
    if (m.layer_experts[i] == 0) continue;
    if (experts != 0 && m.layer_experts[i] != experts)
      return str_cat("layer ", i + 1, " has ", m.layer_experts[i], " experts and an earlier one ", experts, " (a pyramid)");
    experts = m.layer_experts[i];
  }
  if (m.shared_expert_intermediate_size > 0) return "it has a shared expert (--moe-shared-expert-intermediate-size)";
  if (m.residual) return "it is a residual MoE (--mlp-type residual)";
  if (m.router.score != kernels::RouterScoreFunction::Softmax) return "it routes by sigmoid scores";
  if (m.router.scaling_factor != 1.0f) return "it scales the routing probabilities (--moe-router-topk-scaling-factor)";
  if (m.router.grouped()) return "it routes within groups of experts (--moe-router-group-topk)";
  if (!m.dropless()) return "it drops tokens over capacity (--moe-expert-capacity-factor)";
  return "";
}

json qwen3_moe_config(const model::ModelConfig& c, json qwen3) {
  const model::MoeConfig& m = c.moe;
  qwen3["architectures"] = {"Qwen3MoeForCausalLM"};
  qwen3["model_type"] = "qwen3_moe";
  // Every layer with experts is sparse (step 1); the dense ones are listed.
  json dense = json::array();
  int64_t experts = 0;
  for (size_t i = 0; i < m.layer_experts.size(); ++i) {
    if (m.layer_experts[i] == 0) dense.push_back(i);
    else experts = m.layer_experts[i];
  }
  qwen3["decoder_sparse_step"] = 1;
  qwen3["mlp_only_layers"] = dense;
  qwen3["num_experts"] = experts;
  qwen3["num_experts_per_tok"] = m.router.topk;
  qwen3["moe_intermediate_size"] = m.ffn_hidden_size;
  qwen3["norm_topk_prob"] = !m.router.pre_softmax;
  // Training-only, carried across: HF's aux loss is not Megatron's (see MixtralForCausalLM's).
  qwen3["router_aux_loss_coef"] =
      m.load_balancing == model::LoadBalancing::None ? 0.0 : model::json_float(m.aux_loss_coeff);
  qwen3["output_router_logits"] = false;
  return qwen3;
}

}  // namespace tessera::ckpt
