#include "ckpt/megatron_names.h"

#include <charconv>
#include <string>
#include <string_view>
#include <utility>

#include "core/check.h"

namespace tessera::ckpt {
namespace {

bool has_prefix(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }
bool has_suffix(const std::string& s, std::string_view p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// The part of a layer key after "decoder.layers.N.", renamed from the legacy model's and Transformer
// Engine's names to Megatron-Core's local-spec ones (Tessera's).
std::string megatron_layer_part(std::string rest) {
  // Before self_attention was renamed (Megatron's own loader does the same replacement).
  if (has_prefix(rest, "attention.")) rest = "self_" + rest;
  static const std::pair<std::string_view, std::string_view> renames[] = {
      // Legacy ParallelTransformerLayer.
      {"self_attention.query_key_value.", "self_attention.linear_qkv."},
      {"self_attention.dense.", "self_attention.linear_proj."},
      {"mlp.dense_h_to_4h.", "mlp.linear_fc1."},
      {"mlp.dense_4h_to_h.", "mlp.linear_fc2."},
      {"input_norm.", "input_layernorm."},
      {"post_attention_norm.", "pre_mlp_layernorm."},
      {"post_attention_layernorm.", "pre_mlp_layernorm."},
      // Transformer Engine fuses each norm into the linear layer after it.
      {"self_attention.linear_qkv.layer_norm_weight", "input_layernorm.weight"},
      {"self_attention.linear_qkv.layer_norm_bias", "input_layernorm.bias"},
      {"mlp.linear_fc1.layer_norm_weight", "pre_mlp_layernorm.weight"},
      {"mlp.linear_fc1.layer_norm_bias", "pre_mlp_layernorm.bias"},
      // Multi-latent attention with --qk-layernorm: the latents' norms fused into the up projections.
      {"self_attention.linear_q_up_proj.layer_norm_weight", "self_attention.q_layernorm.weight"},
      {"self_attention.linear_q_up_proj.layer_norm_bias", "self_attention.q_layernorm.bias"},
      {"self_attention.linear_kv_up_proj.layer_norm_weight", "self_attention.kv_layernorm.weight"},
      {"self_attention.linear_kv_up_proj.layer_norm_bias", "self_attention.kv_layernorm.bias"},
  };
  for (const auto& [from, to] : renames)
    if (has_prefix(rest, from)) return std::string(to) + rest.substr(from.size());
  return rest;
}

}  // namespace

MegatronKey megatron_key(const std::string& key) {
  MegatronKey out;
  // Megatron-Core before 0.11 saved the router's token counts as a persistent buffer: zero at a save (it
  // zeroes them after each step's expert-bias update), and Tessera counts them afresh each step.
  if (has_suffix(key, "_extra_state") || has_suffix(key, "inv_freq") || has_suffix(key, "router.local_tokens_per_expert")) {
    out.kind = MegatronKey::Kind::NotAWeight;
    out.name = key;
    return out;
  }
  std::string k = key;
  // The legacy GPTModel nests its LanguageModel under "language_model"; its encoder was once "transformer".
  if (has_prefix(k, "language_model.")) k = k.substr(15);
  if (has_prefix(k, "word_embeddings_for_head.")) {
    out.kind = MegatronKey::Kind::TiedCopy;
    out.name = k;
    return out;
  }
  // BERT's masked-LM head: the legacy BertLMHead's bias (vocabulary-parallel) and norm (once "layernorm")
  // are Megatron-Core's output_layer.bias and lm_head.layer_norm, Tessera's names.
  if (k == "lm_head.bias") k = "output_layer.bias";
  if (has_prefix(k, "lm_head.norm.")) k = "lm_head.layer_norm." + k.substr(13);
  if (has_prefix(k, "lm_head.layernorm.")) k = "lm_head.layer_norm." + k.substr(18);
  // The layer stack is "decoder" here whatever the model calls it (a BERT's "encoder", the legacy GPT's
  // "encoder" or "transformer"): megatron_stack_name maps a Tessera name to it.
  if (has_prefix(k, "encoder.")) k = "decoder." + k.substr(8);
  if (has_prefix(k, "transformer.")) k = "decoder." + k.substr(12);
  if (k == "decoder.final_norm.weight" || k == "decoder.final_norm.bias") k = "decoder.final_layernorm." + k.substr(19);
  static constexpr std::string_view kLayers = "decoder.layers.";
  if (has_prefix(k, kLayers)) {
    const size_t dot = k.find('.', kLayers.size());
    int64_t n = -1;
    const char* first = k.data() + kLayers.size();
    const char* last = dot == std::string::npos ? k.data() + k.size() : k.data() + dot;
    const auto [end, ec] = std::from_chars(first, last, n);
    if (ec == std::errc() && end == last && dot != std::string::npos && n >= 0) {
      out.layer = n;
      out.rest = megatron_layer_part(k.substr(dot + 1));
      out.name = std::string(kLayers) + std::to_string(n) + "." + out.rest;
      return out;
    }
  }
  // A multi-token prediction module's layer is named as a decoder layer's (its norms fused the same way);
  // its layer numbers are not shifted by pipeline stage (the modules sit on the last one).
  static constexpr std::string_view kMtp = "mtp.layers.", kMtpLayer = ".transformer_layer.";
  if (has_prefix(k, kMtp)) {
    if (const size_t at = k.find(kMtpLayer); at != std::string::npos)
      k = k.substr(0, at + kMtpLayer.size()) + megatron_layer_part(k.substr(at + kMtpLayer.size()));
  }
  out.name = k;
  return out;
}

std::string megatron_global_expert_key(const std::string& key, int64_t expert_rank, int64_t local_experts,
                                       bool* is_expert) {
  *is_expert = false;
  static constexpr std::string_view kExperts = "mlp.experts.", kLocal = "local_experts.";
  const size_t at = key.find(kExperts);
  if (at == std::string::npos) return key;
  const size_t after = at + kExperts.size();
  int64_t local = -1;
  std::string rest;
  const auto number = [&](size_t from, size_t to) {
    const auto [end, ec] = std::from_chars(key.data() + from, key.data() + to, local);
    return ec == std::errc() && end == key.data() + to && local >= 0;
  };
  if (key.compare(after, kLocal.size(), kLocal) == 0) {  // SequentialMLP: local_experts.L.linear_fc1.weight
    const size_t dot = key.find('.', after + kLocal.size());
    if (dot == std::string::npos || !number(after + kLocal.size(), dot)) return key;
    rest = key.substr(dot + 1);
  } else {  // TEGroupedMLP: linear_fc1.weightL (one tensor per local expert, numbered after the name)
    size_t digits = key.size();
    while (digits > after && key[digits - 1] >= '0' && key[digits - 1] <= '9') --digits;
    if (digits == key.size() || !number(digits, key.size())) return key;
    rest = key.substr(after, digits - after);
    if (rest != "linear_fc1.weight" && rest != "linear_fc2.weight" && rest != "linear_fc1.bias" &&
        rest != "linear_fc2.bias")
      return key;
  }
  *is_expert = true;
  return str_cat(key.substr(0, after), kLocal, expert_rank * local_experts + local, ".", rest);
}

bool megatron_bert_key(const std::string& key) {
  for (const std::string_view p : {"lm_head.", "binary_head.", "pooler.", "language_model.pooler.", "encoder.layers.",
                                   "encoder.final_layernorm."})
    if (has_prefix(key, p)) return true;
  return key.find("tokentype_embeddings.") != std::string::npos;
}

std::string megatron_stack_name(const std::string& tessera_name) {
  return has_prefix(tessera_name, "encoder.") ? "decoder." + tessera_name.substr(8) : tessera_name;
}

MegatronSplit megatron_split(const std::string& name, bool swiglu) {
  if (name.find(".mlp.experts.local_experts.") != std::string::npos) {  // each expert an MLP split as the dense one
    if (has_suffix(name, ".linear_fc1.weight") || has_suffix(name, ".linear_fc1.bias"))
      return swiglu ? MegatronSplit::GatedRows : MegatronSplit::Rows;
    if (has_suffix(name, ".linear_fc2.weight")) return MegatronSplit::Columns;
    return MegatronSplit::Replicated;
  }
  if (name.find(".mlp.shared_experts.") != std::string::npos) {  // a dense MLP beside the experts, split as one
    if (has_suffix(name, ".linear_fc1.weight") || has_suffix(name, ".linear_fc1.bias"))
      return swiglu ? MegatronSplit::GatedRows : MegatronSplit::Rows;
    if (has_suffix(name, ".linear_fc2.weight")) return MegatronSplit::Columns;
    return MegatronSplit::Replicated;
  }
  // Multi-latent attention: the up projections (and linear_q_proj) are column-parallel over the heads, the
  // down projections replicated on every rank; MTP's eh_proj is column-parallel.
  for (const std::string_view column : {".self_attention.linear_q_up_proj.weight", ".self_attention.linear_kv_up_proj.weight",
                                        ".self_attention.linear_q_proj.weight", ".eh_proj.weight"})
    if (has_suffix(name, column)) return MegatronSplit::Rows;
  // The vocabulary-parallel rows: the embedding, the output layer and BERT's output bias.
  if (name == "embedding.word_embeddings.weight" || name == "output_layer.weight" || name == "output_layer.bias")
    return MegatronSplit::Rows;
  if (has_suffix(name, ".self_attention.linear_qkv.weight") || has_suffix(name, ".self_attention.linear_qkv.bias"))
    return MegatronSplit::Rows;
  if (has_suffix(name, ".mlp.linear_fc1.weight") || has_suffix(name, ".mlp.linear_fc1.bias"))
    return swiglu ? MegatronSplit::GatedRows : MegatronSplit::Rows;
  if (has_suffix(name, ".self_attention.linear_proj.weight") || has_suffix(name, ".mlp.linear_fc2.weight"))
    return MegatronSplit::Columns;
  return MegatronSplit::Replicated;  // norms, position embeddings, the row-parallel layers' biases
}

const char* megatron_split_name(MegatronSplit s) {
  switch (s) {
    case MegatronSplit::Replicated: return "whole on every rank";
    case MegatronSplit::Rows: return "by rows";
    case MegatronSplit::GatedRows: return "by rows of the gate and of the up projection";
    case MegatronSplit::Columns: return "by columns";
  }
  return "?";
}

bool megatron_buffer_key(const std::string& key) { return has_suffix(key, "mlp.router.expert_bias"); }

}  // namespace tessera::ckpt
