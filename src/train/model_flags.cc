#include "train/model_flags.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

namespace tessera::train {
namespace {

std::string text(int64_t v) { return std::to_string(v); }
std::string text(bool v) { return v ? "true" : "false"; }
// Nine significant digits tell any two floats apart, so equal text means equal values.
std::string text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}
// Seventeen tell any two doubles apart (--rotary-percent, a double as Python's).
std::string text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

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
  compare("--max-position-embeddings", text(m.max_position_embeddings), text(c.max_position_embeddings));
  compare("--position-embedding-type", megatron_name(m.position_embedding), megatron_name(c.position_embedding));
  compare("--rotary-base", text(m.rotary_base), text(c.rotary_base));
  compare("--rotary-percent", text(m.rotary_percent), text(c.rotary_percent));
  compare("--normalization", megatron_name(m.normalization), megatron_name(c.normalization));
  compare("--norm-epsilon", text(m.norm_epsilon), text(c.norm_epsilon));
  compare("--swiglu", text(m.swiglu), text(c.swiglu));
  compare("--untie-embeddings-and-output-weights", text(m.untie_embeddings_and_output_weights),
          text(c.untie_embeddings_and_output_weights));
  compare("--disable-bias-linear", text(!m.add_bias_linear), text(!c.add_bias_linear));
  compare("--num-experts", experts_text(a.num_experts), experts_text(moe_layer_counts(c.moe)));
  if (c.moe.enabled()) {
    compare("--moe-router-topk", text(m.moe.router.topk), text(c.moe.router.topk));
    compare("--moe-ffn-hidden-size", text(m.moe.ffn_hidden_size), text(c.moe.ffn_hidden_size));
  }
  return out;
}

std::string describe(const std::vector<ModelFlagConflict>& conflicts) {
  std::string s;
  for (const ModelFlagConflict& c : conflicts)
    s += str_cat(s.empty() ? "" : "; ", c.flag, "=", c.given, " (the checkpoint's: ", c.saved, ")");
  return s;
}

}  // namespace tessera::train
