#include "train/model_flags.h"

#include <CLI/CLI.hpp>

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
  compare("--num-layers", text(a.num_layers), text(c.num_layers));
  compare("--hidden-size", text(a.hidden_size), text(c.hidden_size));
  compare("--num-attention-heads", text(a.num_attention_heads), text(c.num_attention_heads));
  compare("--ffn-hidden-size", text(a.ffn_hidden_size), text(c.ffn_hidden_size));
  compare("--kv-channels", text(a.kv_channels), text(c.kv_channels));
  // Without --group-query-attention every head is its own group (training ignores --num-query-groups).
  if (given("--group-query-attention") && a.group_query_attention) {
    if (given("--num-query-groups"))
      compare("--num-query-groups", text(a.num_query_groups), text(c.num_query_groups));
    else if (c.num_query_groups != 1)  // Megatron's default of 1 group
      out.push_back({"--group-query-attention", "true (1 query group, the default of --num-query-groups)",
                     str_cat(c.num_query_groups, " query groups")});
  }
  compare("--seq-length", text(a.seq_length), text(c.seq_length));
  compare("--max-position-embeddings", text(a.max_position_embeddings), text(c.max_position_embeddings));
  compare("--position-embedding-type", a.position_embedding_type,
          c.position_embedding == model::PositionEmbedding::Rope ? "rope" : "learned_absolute");
  compare("--rotary-base", text(a.rotary_base), text(c.rotary_base));
  compare("--rotary-percent", text(a.rotary_percent), text(c.rotary_percent));
  compare("--normalization", a.normalization, c.normalization == model::Normalization::RMSNorm ? "RMSNorm" : "LayerNorm");
  compare("--norm-epsilon", text(a.norm_epsilon), text(c.norm_epsilon));
  compare("--swiglu", text(a.swiglu), text(c.swiglu));
  compare("--untie-embeddings-and-output-weights", text(a.untie_embeddings_and_output_weights),
          text(c.untie_embeddings_and_output_weights));
  compare("--disable-bias-linear", text(a.disable_bias_linear), text(!c.add_bias_linear));
  return out;
}

std::string describe(const std::vector<ModelFlagConflict>& conflicts) {
  std::string s;
  for (const ModelFlagConflict& c : conflicts)
    s += str_cat(s.empty() ? "" : "; ", c.flag, "=", c.given, " (the checkpoint's: ", c.saved, ")");
  return s;
}

}  // namespace tessera::train
