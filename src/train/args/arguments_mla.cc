// The flags of Multi-Latent Attention (Megatron-Core's names: --multi-latent-attention, --q-lora-rank,
// --kv-lora-rank, --qk-head-dim, --qk-pos-emb-head-dim, --v-head-dim, --rope-type and YaRN's
// --rotary-scaling-factor, --mscale, --mscale-all-dim, --yarn-beta-fast, --yarn-beta-slow,
// --yarn-original-max-position-embeddings) bound to ModelConfig::mla, and their rules: what MLA does not
// run with yet is refused by name (model/multi_latent_attention.h).
#include <CLI/CLI.hpp>

#include <cmath>

#include "train/args/argument_rules.h"
#include "train/args/arguments.h"

namespace tessera::train {

using rules::require;
using rules::require_positive;

void add_mla_flags(CLI::App& app, TrainArguments& a) {
  model::MlaConfig& m = a.model.mla;
  app.add_flag("--multi-latent-attention", m.enabled, "Multi-Latent Attention (DeepSeek-V2/V3) in every layer");
  app.add_option("--q-lora-rank", m.q_lora_rank, "Rank of the query's latent (left out: no query compression)");
  app.add_option("--kv-lora-rank", m.kv_lora_rank, "Rank of the keys' and values' latent")->capture_default_str();
  app.add_option("--qk-head-dim", m.qk_head_dim, "Each head's query/key dimensions without RoPE")
      ->capture_default_str();
  app.add_option("--qk-pos-emb-head-dim", m.qk_pos_emb_head_dim,
                 "Each head's query/key RoPE dimensions (one shared key head)")
      ->capture_default_str();
  app.add_option("--v-head-dim", m.v_head_dim, "Each head's value dimensions")->capture_default_str();
  app.add_option("--rope-type", a.rope_type, "rope or yarn (multi-latent attention's default: yarn)");
  app.add_option("--rotary-scaling-factor", m.rotary_scaling_factor, "YaRN's scaling factor")->capture_default_str();
  app.add_option("--mscale", m.mscale, "YaRN's mscale")->capture_default_str();
  app.add_option("--mscale-all-dim", m.mscale_all_dim, "YaRN's mscale of all dimensions (the softmax scale's)")
      ->capture_default_str();
  app.add_option("--yarn-beta-fast", m.beta_fast, "YaRN's beta fast")->capture_default_str();
  app.add_option("--yarn-beta-slow", m.beta_slow, "YaRN's beta slow")->capture_default_str();
  app.add_option("--yarn-original-max-position-embeddings", m.original_max_position_embeddings,
                 "YaRN's original context")->capture_default_str();
}

void finalize_mla_model(TrainArguments& a) {
  model::ModelConfig& c = a.model;
  model::MlaConfig& m = c.mla;
  require(a.rope_type.empty() || a.rope_type == "rope" || a.rope_type == "yarn", "--rope-type", a.rope_type,
          "must be rope or yarn");
  if (!m.enabled) {
    require(a.rope_type != "yarn", "--rope-type", a.rope_type, "needs --multi-latent-attention (YaRN is MLA's RoPE)");
    return;
  }
  const char* flag = "--multi-latent-attention";
  m.yarn = a.rope_type != "rope";
  require(m.q_lora_rank >= 0, "--q-lora-rank", m.q_lora_rank,
          "must not be negative (0 or left out: no query compression)");
  require_positive("--kv-lora-rank", m.kv_lora_rank);
  require_positive("--qk-head-dim", m.qk_head_dim);
  require_positive("--qk-pos-emb-head-dim", m.qk_pos_emb_head_dim);
  require(m.qk_pos_emb_head_dim % 2 == 0, "--qk-pos-emb-head-dim", m.qk_pos_emb_head_dim,
          "must be even (RoPE rotates pairs of dimensions)");
  require_positive("--v-head-dim", m.v_head_dim);
  rules::require_positive_finite("--rotary-scaling-factor", m.rotary_scaling_factor);
  require(std::isfinite(m.mscale), "--mscale", m.mscale, "must be a finite number");
  require(std::isfinite(m.mscale_all_dim), "--mscale-all-dim", m.mscale_all_dim, "must be a finite number");
  require(m.softmax_scale() > 0 && m.rope_mscale() > 0, "--mscale-all-dim", m.mscale_all_dim,
          str_cat("gives a YaRN mscale of 0.1 x mscale x ln(--rotary-scaling-factor=", m.rotary_scaling_factor,
                  ") + 1 that is not positive"));
  rules::require_positive_finite("--yarn-beta-fast", m.beta_fast);
  rules::require_positive_finite("--yarn-beta-slow", m.beta_slow);
  require_positive("--yarn-original-max-position-embeddings", m.original_max_position_embeddings);
  const auto not_with = [&](bool ok, const std::string& what) {
    require(ok, flag, "set", str_cat("cannot be combined with ", what));
  };
  not_with(c.family == "gpt", str_cat("--model-family ", c.family, " (MLA fills GPT's causal attention)"));
  not_with(!a.group_query_attention, "--group-query-attention (MLA's keys and values are per head, from one latent)");
  not_with(c.rotary_percent == 1.0, str_cat("--rotary-percent=", c.rotary_percent,
                                            " (MLA rotates its whole --qk-pos-emb-head-dim part)"));
  not_with(!a.use_rope_scaling && a.rotary_seq_len_interpolation_factor == 0,
           "--use-rope-scaling or --rotary-seq-len-interpolation-factor (MLA's RoPE scaling is YaRN: --rope-type yarn "
           "--rotary-scaling-factor)");
  // --context-parallel-size runs MLA's heads around the ring as SelfAttention's, and --pipeline-token-slices
  // caches the heads' keys and values of the earlier slices (model/token_slice_attention.h), issue 53.
}

}  // namespace tessera::train
