#include "train/args/model_flags.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <tuple>

namespace tessera::train {
namespace {

std::string text(int64_t v) { return std::to_string(v); }
std::string text(bool v) { return v ? "true" : "false"; }
// The shortest decimal that reads back as the value (1e-06, not 9.99999997e-07): equal text means equal
// values, and a value reads as it was given. Doubles: --rotary-percent, a double as Python's.
// Written as Python's repr chooses: plain digits from 1e-4 up to 1e16 (500000, not 5e+05), else an exponent.
template <typename T>
std::string shortest(T v) {
  char buf[400];
  const T size = v < 0 ? -v : v;
  const bool plain = size == 0 || (size >= T(1e-4) && size < T(1e16));
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v, plain ? std::chars_format::fixed
                                                                        : std::chars_format::scientific).ptr);
}
std::string text(float v) { return shortest(v); }
std::string text(double v) { return shortest(v); }

// --num-experts as written: one count, or one per MoE layer when they differ (a pyramid).
std::string experts_text(const std::vector<int64_t>& counts) {
  std::string s;
  for (int64_t e : counts) s += (s.empty() ? "" : " ") + std::to_string(e);
  return s.empty() ? "0" : s;
}
std::vector<int64_t> moe_layer_counts(const model::MoeConfig& m) {
  std::vector<int64_t> counts;
  for (int64_t e : m.layer_experts)
    if (e > 0) counts.push_back(e);
  const bool one_count =
      !counts.empty() && std::all_of(counts.begin(), counts.end(), [&](int64_t e) { return e == counts.front(); });
  return one_count ? std::vector<int64_t>{counts.front()} : counts;
}

// Multi-Latent Attention's flags as text, of a run's model against a checkpoint's: (flag, run's, saved).
std::vector<std::tuple<const char*, std::string, std::string>> mla_texts(const model::MlaConfig& r,
                                                                         const model::MlaConfig& c) {
  return {{"--q-lora-rank", text(r.q_lora_rank), text(c.q_lora_rank)},
          {"--kv-lora-rank", text(r.kv_lora_rank), text(c.kv_lora_rank)},
          {"--qk-head-dim", text(r.qk_head_dim), text(c.qk_head_dim)},
          {"--qk-pos-emb-head-dim", text(r.qk_pos_emb_head_dim), text(c.qk_pos_emb_head_dim)},
          {"--v-head-dim", text(r.v_head_dim), text(c.v_head_dim)},
          {"--rope-type", r.yarn ? "yarn" : "rope", c.yarn ? "yarn" : "rope"},
          {"--rotary-scaling-factor", text(r.rotary_scaling_factor), text(c.rotary_scaling_factor)},
          {"--mscale", text(r.mscale), text(c.mscale)},
          {"--mscale-all-dim", text(r.mscale_all_dim), text(c.mscale_all_dim)},
          {"--yarn-beta-fast", text(r.beta_fast), text(c.beta_fast)},
          {"--yarn-beta-slow", text(r.beta_slow), text(c.beta_slow)},
          {"--yarn-original-max-position-embeddings", text(r.original_max_position_embeddings),
           text(c.original_max_position_embeddings)}};
}

}  // namespace

std::vector<ModelFlagConflict> model_flag_conflicts(const CLI::App& app, const TrainArguments& a,
                                                    const model::ModelConfig& c) {
  const auto given = [&](const char* flag) {
    const CLI::Option* o = app.get_option_no_throw(flag);
    return o != nullptr && o->count() > 0;
  };
  std::vector<ModelFlagConflict> out;
  const auto compare = [&](const char* flag, const std::string& value, const std::string& saved) {
    if (given(flag) && value != saved) out.push_back({flag, value, saved});
  };
  const model::ModelConfig& m = a.model;
  compare("--num-layers", text(m.num_layers), text(c.num_layers));
  compare("--hidden-size", text(m.hidden_size), text(c.hidden_size));
  compare("--num-attention-heads", text(m.num_attention_heads), text(c.num_attention_heads));
  compare("--ffn-hidden-size", text(m.ffn_hidden_size), text(c.ffn_hidden_size));
  compare("--kv-channels", text(m.kv_channels), text(c.kv_channels));
  // Without --group-query-attention every head is its own group (training ignores --num-query-groups).
  if (given("--group-query-attention") && a.group_query_attention) {
    if (given("--num-query-groups"))
      compare("--num-query-groups", text(m.num_query_groups), text(c.num_query_groups));
    else if (c.num_query_groups != 1)  // Megatron's default of 1 group
      out.push_back({"--group-query-attention", "true (1 query group, the default of --num-query-groups)",
                     str_cat(c.num_query_groups, " query groups")});
  }
  compare("--seq-length", text(m.seq_length), text(c.seq_length));
  compare("--encoder-seq-length", text(a.encoder_seq_length), text(c.seq_length));  // Megatron's other name
  compare("--max-position-embeddings", text(m.max_position_embeddings), text(c.max_position_embeddings));
  compare("--position-embedding-type", megatron_name(m.position_embedding), megatron_name(c.position_embedding));
  compare("--rotary-base", text(m.rotary_base), text(c.rotary_base));
  compare("--rotary-percent", text(m.rotary_percent), text(c.rotary_percent));
  // RoPE scaling: the flags as the run gives them against what the checkpoint's model has.
  const auto llama3 = [](const model::ModelConfig& x) { return x.rope_scaling == model::RopeScaling::Llama3; };
  const auto linear_factor = [](const model::ModelConfig& x) {
    return x.rope_scaling == model::RopeScaling::Linear ? text(x.rope_scaling_factor) : std::string("none");
  };
  if (given("--use-rope-scaling")) compare("--use-rope-scaling", text(a.use_rope_scaling), text(llama3(c)));
  if (llama3(c) || a.use_rope_scaling)
    compare("--rope-scaling-factor", text(m.rope_scaling_factor), text(c.rope_scaling_factor));
  compare("--rotary-seq-len-interpolation-factor",
          a.rotary_seq_len_interpolation_factor == 0 ? std::string("none")
                                                     : text(double(a.rotary_seq_len_interpolation_factor)),
          linear_factor(c));
  compare("--qk-layernorm", text(m.qk_layernorm), text(c.qk_layernorm));
  compare("--normalization", megatron_name(m.normalization), megatron_name(c.normalization));
  compare("--norm-epsilon", text(m.norm_epsilon), text(c.norm_epsilon));
  compare("--swiglu", text(m.swiglu), text(c.swiglu));
  compare("--untie-embeddings-and-output-weights", text(m.untie_embeddings_and_output_weights),
          text(c.untie_embeddings_and_output_weights));
  compare("--disable-bias-linear", text(!m.add_bias_linear), text(!c.add_bias_linear));
  compare("--num-experts", experts_text(a.num_experts), experts_text(moe_layer_counts(c.moe)));
  compare("--multi-latent-attention", text(m.mla.enabled), text(c.mla.enabled));
  if (c.mla.enabled)
    for (const auto& [flag, given_value, saved] : mla_texts(m.mla, c.mla)) compare(flag, given_value, saved);
  if (c.moe.enabled()) {
    compare("--moe-router-topk", text(m.moe.router.topk), text(c.moe.router.topk));
    compare("--moe-ffn-hidden-size", text(m.moe.ffn_hidden_size), text(c.moe.ffn_hidden_size));
  }
  return out;
}

std::vector<ModelDifference> model_differences(const model::ModelConfig& run, const model::ModelConfig& saved) {
  std::vector<ModelDifference> out;
  const auto compare = [&](const char* flag, const std::string& value, const std::string& was, bool shapes) {
    if (value != was) out.push_back({{flag, value, was}, shapes});
  };
  const model::ModelConfig &r = run, &c = saved;
  compare("--model-family", r.family, c.family, true);
  compare("--num-layers", text(r.num_layers), text(c.num_layers), true);
  compare("--hidden-size", text(r.hidden_size), text(c.hidden_size), true);
  // More heads of fewer channels keep the projections' shapes: the same weights, another model. The
  // query groups and head size are named where a model sets them (grouped-query attention, an explicit
  // --kv-channels), not where they follow from the heads.
  const bool attention_shapes =
      r.qkv_size() != c.qkv_size() || r.num_attention_heads * r.kv_channels != c.num_attention_heads * c.kv_channels;
  compare("--num-attention-heads", text(r.num_attention_heads), text(c.num_attention_heads), attention_shapes);
  const auto grouped = [](const model::ModelConfig& m) { return m.num_query_groups != m.num_attention_heads; };
  if (grouped(r) || grouped(c))
    compare("--num-query-groups", text(r.num_query_groups), text(c.num_query_groups), attention_shapes);
  const auto own_head_size = [](const model::ModelConfig& m) {
    return m.kv_channels * m.num_attention_heads != m.hidden_size;
  };
  if (own_head_size(r) || own_head_size(c))
    compare("--kv-channels", text(r.kv_channels), text(c.kv_channels), attention_shapes);
  const auto dense_mlp = [](const model::ModelConfig& m) {
    for (int64_t layer = 1; layer <= m.num_layers; ++layer)
      if (m.moe.experts(layer) == 0) return true;
    return m.moe.residual;
  };
  if (dense_mlp(r) || dense_mlp(c)) compare("--ffn-hidden-size", text(r.ffn_hidden_size), text(c.ffn_hidden_size), true);
  compare("--position-embedding-type", megatron_name(r.position_embedding), megatron_name(c.position_embedding), true);
  using model::PositionEmbedding;
  if (r.position_embedding == c.position_embedding && c.position_embedding == PositionEmbedding::LearnedAbsolute)
    compare("--max-position-embeddings", text(r.max_position_embeddings), text(c.max_position_embeddings), true);
  if (r.position_embedding == c.position_embedding && c.position_embedding == PositionEmbedding::Rope) {
    compare("--rotary-base", text(r.rotary_base), text(c.rotary_base), false);
    compare("--rotary-percent", text(r.rotary_percent), text(c.rotary_percent), false);
    const auto scaling = [](const model::ModelConfig& m) {
      switch (m.rope_scaling) {
        case model::RopeScaling::None: return std::string("none");
        case model::RopeScaling::Linear: return str_cat("linear, factor ", m.rope_scaling_factor);
        case model::RopeScaling::Llama3:
          return str_cat("llama3, factor ", m.rope_scaling_factor, " (bands ", m.rope_low_freq_factor, ", ",
                         m.rope_high_freq_factor, ", ", m.rope_original_max_position, ")");
      }
      return std::string();
    };
    compare("--use-rope-scaling", scaling(r), scaling(c), false);
  }
  compare("--qk-layernorm", text(r.qk_layernorm), text(c.qk_layernorm), true);
  compare("--multi-latent-attention", text(r.mla.enabled), text(c.mla.enabled), true);
  if (r.mla.enabled && c.mla.enabled)
    for (const auto& [flag, value, was] : mla_texts(r.mla, c.mla)) {  // the sizes change shapes, RoPE does not
      const std::string name = flag;
      compare(flag, value, was, name.find("head-dim") != std::string::npos || name.find("rank") != std::string::npos);
    }
  compare("--normalization", megatron_name(r.normalization), megatron_name(c.normalization), true);
  compare("--norm-epsilon", text(r.norm_epsilon), text(c.norm_epsilon), false);
  compare("--swiglu", text(r.swiglu), text(c.swiglu), true);
  compare("--untie-embeddings-and-output-weights", text(r.untie_embeddings_and_output_weights),
          text(c.untie_embeddings_and_output_weights), true);
  compare("--disable-bias-linear", text(!r.add_bias_linear), text(!c.add_bias_linear), true);
  compare("--apply-residual-connection-post-layernorm", text(r.apply_residual_connection_post_layernorm),
          text(c.apply_residual_connection_post_layernorm), false);
  if (r.family == "bert" && c.family == "bert")
    compare("--bert-no-binary-head", text(!r.bert_binary_head), text(!c.bert_binary_head), true);
  // The tokenizer's ids (the padding is the layout's: resharding copies the rows both paddings have).
  compare("the tokenizer's vocabulary (ids)", text(r.vocab_size), text(c.vocab_size), true);
  // One count when every layer has it, else each layer's (0: dense, as --moe-layer-freq places them).
  const auto layer_experts = [](const model::MoeConfig& m) {
    const bool dense_layer = std::find(m.layer_experts.begin(), m.layer_experts.end(), 0) != m.layer_experts.end();
    return experts_text(dense_layer ? m.layer_experts : moe_layer_counts(m));
  };
  compare("--num-experts", layer_experts(r.moe), layer_experts(c.moe), true);
  if (r.moe.enabled() && c.moe.enabled()) {
    const model::MoeConfig &rm = r.moe, &cm = c.moe;
    compare("--moe-ffn-hidden-size", text(rm.ffn_hidden_size), text(cm.ffn_hidden_size), true);
    compare("--moe-shared-expert-intermediate-size", text(rm.shared_expert_intermediate_size),
            text(cm.shared_expert_intermediate_size), true);
    compare("--mlp-type", rm.residual ? "residual" : "standard", cm.residual ? "residual" : "standard", true);
    compare("--moe-router-topk", text(rm.router.topk), text(cm.router.topk), false);
    const auto score = [](const model::MoeConfig& m) {
      return m.router.score == kernels::RouterScoreFunction::Sigmoid ? "sigmoid" : "softmax";
    };
    compare("--moe-router-score-function", score(rm), score(cm), false);
    compare("--moe-router-pre-softmax", text(rm.router.pre_softmax), text(cm.router.pre_softmax), false);
    compare("--moe-router-topk-scaling-factor", text(rm.router.scaling_factor), text(cm.router.scaling_factor), false);
  }
  return out;
}

std::string describe(const std::vector<ModelDifference>& differences) {
  return describe(std::vector<ModelFlagConflict>(differences.begin(), differences.end()));
}

std::string describe(const std::vector<ModelFlagConflict>& conflicts) {
  std::string s;
  for (const ModelFlagConflict& c : conflicts)
    s += str_cat(s.empty() ? "" : "; ", c.flag, "=", c.given, " (the checkpoint's: ", c.saved, ")");
  return s;
}

}  // namespace tessera::train
