#include "ckpt/hf_convert.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_bert.h"
#include "ckpt/hf_config.h"
#include "ckpt/hf_layout.h"
#include "ckpt/hf_moe.h"
#include "ckpt/hf_tokenizer.h"
#include "ckpt/safetensors.h"
#include "model/config.h"
#include "model/model_factory.h"

namespace tessera::ckpt {
namespace fs = std::filesystem;
using nlohmann::json;
using TensorMap = std::map<std::string, Tensor>;

namespace {
using hf_layout::concat_rows;
using hf_layout::merge_qkv;
using hf_layout::Qkv;
using hf_layout::rows;
using hf_layout::split_qkv;
using hf_layout::transpose2d;

// ---- the families -----------------------------------------------------------------------------

enum class Family { Gpt2, Llama, Mixtral, Qwen3, Qwen3Moe, DeepseekV3, DeepseekV2 };

const char* architecture(Family f) {
  switch (f) {
    case Family::Gpt2: return "GPT2LMHeadModel";
    case Family::Llama: return "LlamaForCausalLM";
    case Family::Mixtral: return "MixtralForCausalLM";
    case Family::Qwen3: return "Qwen3ForCausalLM";
    case Family::Qwen3Moe: return "Qwen3MoeForCausalLM";
    case Family::DeepseekV3: return "DeepseekV3ForCausalLM";
    case Family::DeepseekV2: return "DeepseekV2ForCausalLM";
  }
  return "";
}

// What keeps a mixture-of-experts model from being a MixtralForCausalLM, or "" if nothing: every Mixtral
// layer is one sparse block of the same experts, routed softmax -> top-k -> renormalised (Tessera's
// default: a softmax over the k chosen logits is the same), dropless, with bias-free SwiGLU experts.
// Training-only settings (the load-balancing and z-losses, router input jitter) do not change the model.
std::string not_mixtral(const model::ModelConfig& c) {
  const model::MoeConfig& m = c.moe;
  if (c.position_embedding != model::PositionEmbedding::Rope || c.normalization != model::Normalization::RMSNorm ||
      !c.swiglu)
    return "it is not Llama style (--position-embedding-type rope, --normalization RMSNorm, --swiglu)";
  if (c.add_bias_linear) return "it has biases (Mixtral has none: --disable-bias-linear)";
  for (size_t i = 0; i < m.layer_experts.size(); ++i) {
    if (m.layer_experts[i] == 0) return str_cat("layer ", i + 1, " is a dense MLP (--moe-layer-freq)");
    if (m.layer_experts[i] != m.layer_experts[0])
      return str_cat("layer ", i + 1, " has ", m.layer_experts[i], " experts and layer 1 ", m.layer_experts[0],
                     " (a pyramid)");
  }
  if (m.shared_expert_intermediate_size > 0) return "it has a shared expert (--moe-shared-expert-intermediate-size)";
  if (m.residual) return "it is a residual MoE (--mlp-type residual)";
  if (m.router.score != kernels::RouterScoreFunction::Softmax) return "it routes by sigmoid scores";
  if (m.router.pre_softmax) return "its top-k probabilities are not renormalised (--moe-router-pre-softmax)";
  if (m.router.scaling_factor != 1.0f) return "it scales the routing probabilities (--moe-router-topk-scaling-factor)";
  if (m.router.grouped()) return "it routes within groups of experts (--moe-router-group-topk)";
  if (!m.dropless()) return "it drops tokens over capacity (--moe-expert-capacity-factor; Mixtral is dropless)";
  return "";
}

Family family_of(const model::ModelConfig& c) {
  using model::Normalization;
  using model::PositionEmbedding;
  // The name and layout mapping below is GPT's; another family brings its own.
  TESSERA_CHECK(c.family == "gpt", "convert: Hugging Face conversion is for the gpt model family, not '", c.family,
                "'");
  // DeepSeek-V3 keeps its MTP modules as the layers after the last; no other family has them.
  TESSERA_CHECK(c.mtp_num_layers == 0 || c.mla.enabled, "convert: a model with --mtp-num-layers=", c.mtp_num_layers,
                " converts only as DeepseekV3ForCausalLM (with --multi-latent-attention)");
  Family f = Family::Llama;
  if (c.mla.enabled) {
    // DeepSeek-V3: Llama's embedding, norms and output around MLA and its MoE blocks (hf_moe.h).
    TESSERA_CHECK(c.moe.enabled() && c.position_embedding == PositionEmbedding::Rope &&
                      c.normalization == Normalization::RMSNorm && c.swiglu && !c.add_bias_linear && c.qk_layernorm,
                  "convert: a model with --multi-latent-attention converts as DeepseekV3/V2ForCausalLM only with MoE, "
                  "rope, RMSNorm, SwiGLU, --disable-bias-linear and --qk-layernorm (the latents' norms)");
    // Softmax routing is DeepSeek-V2's, sigmoid DeepSeek-V3's.
    const bool v2 = c.moe.router.score == kernels::RouterScoreFunction::Softmax;
    const std::string why = not_deepseek(c, v2);
    TESSERA_CHECK(why.empty(), "convert: this multi-latent attention model has no ",
                  v2 ? "DeepseekV2ForCausalLM" : "DeepseekV3ForCausalLM", " equivalent: ", why);
    return v2 ? Family::DeepseekV2 : Family::DeepseekV3;
  }
  if (c.moe.enabled() && c.qk_layernorm) {
    const std::string why = not_qwen3_moe(c);
    TESSERA_CHECK(why.empty(), "convert: this mixture-of-experts model with --qk-layernorm has no "
                  "Qwen3MoeForCausalLM equivalent: ", why);
    f = Family::Qwen3Moe;
  } else if (c.moe.enabled()) {
    const std::string why = not_mixtral(c);
    TESSERA_CHECK(why.empty(), "convert: this mixture-of-experts model has no MixtralForCausalLM equivalent: ", why);
    f = Family::Mixtral;
  } else if (c.position_embedding == PositionEmbedding::LearnedAbsolute &&
             c.normalization == Normalization::LayerNorm && !c.swiglu && !c.untie_embeddings_and_output_weights &&
             c.add_bias_linear && c.num_query_groups == c.num_attention_heads &&
             c.kv_channels * c.num_attention_heads == c.hidden_size) {
    return Family::Gpt2;
  } else if (c.position_embedding != PositionEmbedding::Rope || c.normalization != Normalization::RMSNorm ||
             !c.swiglu) {
    throw Error(
        "convert: this model is neither GPT-2 style (learned positions, LayerNorm, GELU, biases, tied output, "
        "multi-head attention) nor Llama style (rope, RMSNorm, SwiGLU); Hugging Face export supports those two "
        "(and Llama style mixture-of-experts models as MixtralForCausalLM)");
  }
  if (f == Family::Llama && c.qk_layernorm) {
    // Qwen3 is Llama with RMSNorm on each head's query and key, and no MLP biases.
    TESSERA_CHECK(!c.add_bias_linear, "convert: a model with --qk-layernorm and biases has no Qwen3ForCausalLM "
                  "equivalent (its MLP has no biases: --disable-bias-linear)");
    f = Family::Qwen3;
  }
  TESSERA_CHECK(c.rotary_percent == 1.0, "convert: --rotary-percent ", c.rotary_percent, " has no ",
                architecture(f), " equivalent (it rotates whole heads)");
  return f;
}

std::string layer(int64_t i) { return str_cat("decoder.layers.", i, "."); }

json hf_config(const model::ModelConfig& c, Family f, const json& tessera_args) {
  if (f == Family::Gpt2)
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", c.padded_vocab_size},
            {"n_positions", c.max_position_embeddings},
            {"n_ctx", c.max_position_embeddings},
            {"n_embd", c.hidden_size},
            {"n_layer", c.num_layers},
            {"n_head", c.num_attention_heads},
            {"n_inner", c.ffn_hidden_size},
            {"activation_function", "gelu_new"},
            {"layer_norm_epsilon", model::json_float(c.norm_epsilon)},
            {"resid_pdrop", model::json_float(c.hidden_dropout)},
            {"embd_pdrop", model::json_float(c.hidden_dropout)},
            {"attn_pdrop", model::json_float(c.attention_dropout)},
            {"initializer_range", model::json_float(c.init_method_std)},
            {"tie_word_embeddings", true},
            {"torch_dtype", "float32"},
            {"tessera_args", tessera_args}};
  json llama = {{"architectures", {"LlamaForCausalLM"}},
                {"model_type", "llama"},
                {"vocab_size", c.padded_vocab_size},
                {"hidden_size", c.hidden_size},
                {"intermediate_size", c.ffn_hidden_size},
                {"num_hidden_layers", c.num_layers},
                {"num_attention_heads", c.num_attention_heads},
                {"num_key_value_heads", c.num_query_groups},
                {"head_dim", c.kv_channels},
                {"max_position_embeddings", c.max_position_embeddings},
                {"rms_norm_eps", model::json_float(c.norm_epsilon)},
                {"rope_theta", model::json_float(c.rotary_base)},
                {"hidden_act", "silu"},
                {"attention_bias", c.add_bias_linear},
                {"mlp_bias", c.add_bias_linear},
                {"attention_dropout", model::json_float(c.attention_dropout)},
                {"initializer_range", model::json_float(c.init_method_std)},
                {"tie_word_embeddings", !c.untie_embeddings_and_output_weights},
                {"torch_dtype", "float32"},
                {"tessera_args", tessera_args}};
  if (c.rope_scaling == model::RopeScaling::Linear)
    llama["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope_scaling_factor}};
  if (c.rope_scaling == model::RopeScaling::Llama3)
    llama["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", c.rope_scaling_factor},
                             {"low_freq_factor", c.rope_low_freq_factor},
                             {"high_freq_factor", c.rope_high_freq_factor},
                             {"original_max_position_embeddings", c.rope_original_max_position}};
  if (f == Family::DeepseekV3 || f == Family::DeepseekV2) return deepseek_config(c, llama, f == Family::DeepseekV2);
  if (f == Family::Qwen3 || f == Family::Qwen3Moe) {
    json qwen3 = llama;
    qwen3.erase("mlp_bias");
    qwen3["architectures"] = {"Qwen3ForCausalLM"};
    qwen3["model_type"] = "qwen3";
    qwen3["use_sliding_window"] = false;
    qwen3["sliding_window"] = nullptr;
    qwen3["max_window_layers"] = c.num_layers;
    return f == Family::Qwen3Moe ? qwen3_moe_config(c, qwen3) : qwen3;
  }
  if (f != Family::Mixtral) return llama;
  // Mixtral is Llama with a sparse MoE block in every layer (and no biases, which export refuses).
  const model::MoeConfig& m = c.moe;
  json mixtral = llama;
  mixtral.erase("attention_bias");
  mixtral.erase("mlp_bias");
  mixtral["architectures"] = {"MixtralForCausalLM"};
  mixtral["model_type"] = "mixtral";
  mixtral["intermediate_size"] = m.ffn_hidden_size;
  mixtral["sliding_window"] = nullptr;  // full causal attention
  mixtral["num_local_experts"] = m.layer_experts[0];
  mixtral["num_experts_per_tok"] = m.router.topk;
  // Training-only: HF's aux loss (one over all layers' tokens, times E rather than Megatron's E/k per
  // layer) is not Megatron's, so this coefficient only carries the run's setting across.
  mixtral["router_aux_loss_coef"] =
      m.load_balancing == model::LoadBalancing::None ? 0.0 : model::json_float(m.aux_loss_coeff);
  mixtral["router_jitter_noise"] = model::json_float(m.input_jitter_eps);
  mixtral["output_router_logits"] = false;
  return mixtral;
}

// A tensor the conversion did not use would be silently lost: an error, except for what Hugging Face
// files may carry besides the weights (attention-mask buffers, rotary tables, GPT-2's tied lm_head).
void check_all_used(const TensorMap& src, const std::set<std::string>& used, bool to_hf) {
  std::string unused;
  for (const auto& entry : src) {
    const std::string& name = entry.first;  // not a structured binding: clang 14 cannot capture those
    if (used.count(name)) continue;
    auto ends_with = [&](const std::string& suffix) {
      return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (!to_hf && (ends_with(".attn.bias") || ends_with(".attn.masked_bias") || ends_with("rotary_emb.inv_freq") ||
                   name == "lm_head.weight"))
      continue;
    unused += " " + name;
  }
  TESSERA_CHECK(unused.empty(), "convert: the ", to_hf ? "checkpoint" : "Hugging Face model",
                " has tensors this model configuration does not use:", unused);
}

// Tessera names -> Hugging Face names (and back), one family at a time. `to_hf` chooses the direction;
// `src` holds the tensors of the source side, the result those of the other side.
TensorMap map_tensors(const model::ModelConfig& c, Family f, const TensorMap& src, bool to_hf) {
  TensorMap out;
  std::set<std::string> used;
  auto get = [&](const std::string& name) -> const Tensor& {
    used.insert(name);
    auto it = src.find(name);
    TESSERA_CHECK(it != src.end(), "convert: the ", to_hf ? "checkpoint" : "Hugging Face model", " has no tensor ", name);
    return it->second;
  };
  // A tensor that only changes its name.
  auto rename = [&](const std::string& tessera, const std::string& hf) {
    if (to_hf) out[hf] = get(tessera);
    else out[tessera] = get(hf);
  };
  // A Tessera [out, in] weight stored transposed (GPT-2's Conv1D).
  auto transposed = [&](const std::string& tessera, const std::string& hf) {
    if (to_hf) out[hf] = transpose2d(get(tessera));
    else out[tessera] = transpose2d(get(hf));
  };
  const int64_t groups = c.num_query_groups, per_group = c.query_heads_per_group(), d = c.kv_channels;
  const bool bias = c.add_bias_linear;

  if (f == Family::Gpt2) {
    rename("embedding.word_embeddings.weight", "transformer.wte.weight");
    rename("embedding.position_embeddings.weight", "transformer.wpe.weight");
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string t = layer(i), h = str_cat("transformer.h.", i, ".");
      for (const char* p : {"weight", "bias"}) {
        rename(t + "input_layernorm." + p, h + "ln_1." + p);
        rename(t + "pre_mlp_layernorm." + p, h + "ln_2." + p);
      }
      // c_attn: [H, 3H] with columns [Q | K | V]; Tessera's rows interleave them per head.
      for (const char* p : {"weight", "bias"}) {
        const std::string tn = t + "self_attention.linear_qkv." + p, hn = h + "attn.c_attn." + p;
        const bool w = std::string(p) == "weight";
        if (to_hf) {
          Qkv x = split_qkv(get(tn), groups, per_group, d);
          Tensor stacked = concat_rows({x.q, x.k, x.v});
          out[hn] = w ? transpose2d(stacked) : stacked;
        } else {
          Tensor stacked = w ? transpose2d(get(hn)) : get(hn);
          const int64_t hd = c.num_attention_heads * d;
          out[tn] = merge_qkv({rows(stacked, 0, hd), rows(stacked, hd, hd), rows(stacked, 2 * hd, hd)}, groups,
                              per_group, d);
        }
      }
      transposed(t + "self_attention.linear_proj.weight", h + "attn.c_proj.weight");
      rename(t + "self_attention.linear_proj.bias", h + "attn.c_proj.bias");
      transposed(t + "mlp.linear_fc1.weight", h + "mlp.c_fc.weight");
      rename(t + "mlp.linear_fc1.bias", h + "mlp.c_fc.bias");
      transposed(t + "mlp.linear_fc2.weight", h + "mlp.c_proj.weight");
      rename(t + "mlp.linear_fc2.bias", h + "mlp.c_proj.bias");
    }
    rename("decoder.final_layernorm.weight", "transformer.ln_f.weight");
    rename("decoder.final_layernorm.bias", "transformer.ln_f.bias");
    check_all_used(src, used, to_hf);
    return out;
  }

  // SwiGLU's fc1 [gate; up] <-> Llama's gate_proj and up_proj, Mixtral's w1 and w3.
  HfTensorMapper mapper{src, out, used, to_hf};
  auto swiglu_fc1 = [&](const std::string& fc1, const std::string& gate, const std::string& up, int64_t width) {
    mapper.swiglu_fc1(fc1, gate, up, width);
  };
  rename("embedding.word_embeddings.weight", "model.embed_tokens.weight");
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string t = layer(i), h = str_cat("model.layers.", i, ".");
    rename(t + "input_layernorm.weight", h + "input_layernorm.weight");
    rename(t + "pre_mlp_layernorm.weight", h + "post_attention_layernorm.weight");
    const bool deepseek = f == Family::DeepseekV3 || f == Family::DeepseekV2;
    if (f == Family::Qwen3Moe || deepseek) map_moe_family_mlp(c, i + 1, t, h, mapper);
    if (deepseek) {  // no biases (family_of)
      map_mla_attention(c, t, h, mapper);
      continue;
    }
    for (const char* p : {"weight", "bias"}) {
      if (std::string(p) == "bias" && !bias) continue;
      const std::string tn = t + "self_attention.linear_qkv." + p;
      const std::string q = h + "self_attn.q_proj." + p, k = h + "self_attn.k_proj." + p, v = h + "self_attn.v_proj." + p;
      if (to_hf) {
        Qkv x = split_qkv(get(tn), groups, per_group, d);
        out[q] = x.q, out[k] = x.k, out[v] = x.v;
      } else {
        out[tn] = merge_qkv({get(q), get(k), get(v)}, groups, per_group, d);
      }
      rename(t + "self_attention.linear_proj." + p, h + "self_attn.o_proj." + p);
      if (f == Family::Llama || f == Family::Qwen3) {
        swiglu_fc1(t + "mlp.linear_fc1." + p, h + "mlp.gate_proj." + p, h + "mlp.up_proj." + p, c.ffn_hidden_size);
        rename(t + "mlp.linear_fc2." + p, h + "mlp.down_proj." + p);
      }
    }
    if (c.qk_layernorm) {  // Qwen3's q_norm and k_norm (RMSNorm: weights only)
      rename(t + "self_attention.q_layernorm.weight", h + "self_attn.q_norm.weight");
      rename(t + "self_attention.k_layernorm.weight", h + "self_attn.k_norm.weight");
    }
    if (f == Family::Mixtral) {  // no biases (not_mixtral); Megatron's loader_mixtral_hf.py mapping
      const std::string moe = h + "block_sparse_moe.";
      rename(t + "mlp.router.weight", moe + "gate.weight");
      for (int64_t e = 0; e < c.moe.experts(i + 1); ++e) {
        const std::string te = str_cat(t, "mlp.experts.local_experts.", e, "."), he = str_cat(moe, "experts.", e, ".");
        swiglu_fc1(te + "linear_fc1.weight", he + "w1.weight", he + "w3.weight", c.moe.ffn_hidden_size);
        rename(te + "linear_fc2.weight", he + "w2.weight");
      }
    }
  }
  rename("decoder.final_layernorm.weight", "model.norm.weight");
  if (c.untie_embeddings_and_output_weights) rename("output_layer.weight", "lm_head.weight");
  if (f == Family::DeepseekV3) map_deepseek_mtp(c, mapper);
  check_all_used(src, used, to_hf);
  return out;
}

void write_text(const fs::path& path, const std::string& text) {
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    TESSERA_CHECK(out.good(), "convert: cannot write ", tmp.string());
  }
  fs::rename(tmp, path);
}

// Exporting over an earlier export: as save_pretrained cleans the folder of a previous save, its weight
// files go, or a stale model.safetensors.index.json (or shards) would hand a loader the previous model
// beside this one. config.json goes first: a directory holding one is a complete export.
void remove_previous_export(const fs::path& dir) {
  fs::remove(dir / "config.json");
  const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  std::vector<fs::path> previous;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == "model.safetensors" || name == "model.safetensors.index.json" || std::regex_match(name, shard))
      previous.push_back(e.path());
  }
  for (const fs::path& p : previous) fs::remove(p);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), "convert: ", path.string(), " is missing or unreadable");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Tensor to_fp32(const SafetensorsFile& f, const std::string& name) {
  Tensor t = f.read(name);
  if (t.dtype() == DType::F32) return t;
  TESSERA_CHECK(t.dtype() == DType::BF16, "convert: ", f.path(), ": tensor ", name, " is ", dtype_name(t.dtype()),
                "; fp32 and bf16 are supported");
  Tensor out = Tensor::empty(t.shape());
  const auto* src = static_cast<const uint16_t*>(t.host_raw());
  for (int64_t i = 0; i < t.numel(); ++i) out.host_f32()[i] = bf16_to_fp32(src[i]);
  return out;
}

}  // namespace

std::map<std::string, Tensor> to_hugging_face_layout(const model::ModelConfig& config,
                                                      const std::map<std::string, Tensor>& tessera) {
  if (config.family == "bert") return bert_to_hugging_face(config, tessera, /*gradients=*/true);
  return map_tensors(config, family_of(config), tessera, /*to_hf=*/true);
}

void export_hugging_face(const std::string& load_dir, const std::string& out_dir, int64_t max_shard_bytes) {
  TESSERA_CHECK(max_shard_bytes > 0, "convert: --max-shard-size must be positive");
  TrainingState state;
  std::vector<std::pair<std::string, Tensor>> full = load_full_model(load_dir, &state);
  TESSERA_CHECK(state.args.contains("model"), "convert: checkpoint ", load_dir, " records no model configuration");
  const model::ModelConfig c = model::config_from_json(state.args["model"]);
  const bool bert = c.family == "bert";  // hf_bert.h
  const Family f = bert ? Family::Gpt2 : family_of(c);
  TensorMap tessera(full.begin(), full.end());
  TensorMap hf = bert ? bert_to_hugging_face(c, tessera) : map_tensors(c, f, tessera, /*to_hf=*/true);

  // Shards in name order, each up to max_shard_bytes (a tensor larger than that gets a shard alone).
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  int64_t bytes = 0, total = 0;
  for (const auto& [name, t] : hf) {
    int64_t n = static_cast<int64_t>(t.nbytes());
    if (!shards.back().empty() && bytes + n > max_shard_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().emplace_back(name, t);
    bytes += n;
    total += n;
  }
  fs::create_directories(out_dir);
  remove_previous_export(out_dir);
  const std::map<std::string, std::string> meta{{"format", "pt"}};
  if (shards.size() == 1) {
    write_safetensors((fs::path(out_dir) / "model.safetensors").string(), shards[0], meta);
  } else {
    json weight_map = json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      write_safetensors((fs::path(out_dir) / name).string(), shards[i], meta);
      for (const auto& [tensor, t] : shards[i]) weight_map[tensor] = name;
    }
    write_text(fs::path(out_dir) / "model.safetensors.index.json",
               json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n");
  }
  // The tokenizer's files under Hugging Face's names; tessera_args then name them, not this machine's paths.
  const json args = export_hf_tokenizer(out_dir, state, state.args, c.max_position_embeddings);
  // config.json last: a directory with it is complete.
  write_text(fs::path(out_dir) / "config.json", (bert ? bert_hf_config(c, args) : hf_config(c, f, args)).dump(2) + "\n");
}

void import_hugging_face(const std::string& hf_dir, const std::string& save_dir) {
  const fs::path dir(hf_dir);
  const std::string config_path = (dir / "config.json").string();
  const std::string config_text = read_text(config_path);
  const HfConfig parsed = parse_hf_config(config_text, config_path);
  const model::ModelConfig& c = parsed.config;
  const bool bert = parsed.family == HfFamily::Bert || parsed.family == HfFamily::MegatronBert;
  const Family f = bert ? Family::Gpt2 : family_of(c);  // a recorded run must be its architecture's model
  const Family named = parsed.family == HfFamily::Mixtral      ? Family::Mixtral
                       : parsed.family == HfFamily::Llama      ? Family::Llama
                       : parsed.family == HfFamily::Qwen3      ? Family::Qwen3
                       : parsed.family == HfFamily::Qwen3Moe   ? Family::Qwen3Moe
                       : parsed.family == HfFamily::DeepseekV3 ? Family::DeepseekV3
                       : parsed.family == HfFamily::DeepseekV2 ? Family::DeepseekV2
                                                               : Family::Gpt2;
  TESSERA_CHECK(bert || f == named, "convert: ", config_path, " names ", architecture(named),
                " but describes a ", architecture(f), " model");
  const json hf = json::parse(config_text);  // valid: parse_hf_config read it

  // Every tensor of every shard, by its Hugging Face name.
  // One model.safetensors is preferred to an index, as transformers' from_pretrained prefers it.
  std::vector<std::string> files{"model.safetensors"};
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (!fs::exists(dir / files[0]) && fs::exists(index_path))
    files = parse_hf_shard_index(read_text(index_path), index_path.string());
  TensorMap hf_tensors, fp8;
  for (const std::string& name : files) {
    SafetensorsFile sf = SafetensorsFile::open((dir / name).string());
    for (const std::string& t : sf.names()) {
      if (sf.is_fp8_e4m3(t)) fp8[t] = sf.read_fp8_e4m3(t);
      else hf_tensors[t] = to_fp32(sf, t);
    }
  }
  dequantize_fp8_weights(hf, fp8, hf_tensors);  // DeepSeek-V3's FP8 release
  TensorMap tessera = bert ? bert_from_hugging_face(c, hf_tensors) : map_tensors(c, f, hf_tensors, /*to_hf=*/false);
  // Every tensor must have the shape config.json gives it, as from_pretrained refuses a size mismatch: an
  // edited vocab_size or n_positions was imported, and loading then kept the rows that fit, silently.
  model::ParameterSet declared;
  model::build_model_chunk(c, declared);  // declares the shapes, allocates nothing
  for (const model::Parameter& p : declared.params()) {
    const auto it = tessera.find(p.spec.name);
    if (it == tessera.end()) continue;  // the mapping itself reports what is missing or unused
    TESSERA_CHECK(it->second.shape() == p.spec.shape, "convert: ", config_path, " gives ", p.spec.name, " the shape ",
                  shape_str(p.spec.shape), " but the Hugging Face tensor has ", shape_str(it->second.shape()),
                  " (config.json and the weights disagree)");
  }

  json args = hf.contains("tessera_args") && hf["tessera_args"].is_object() ? hf["tessera_args"]
                                                                               : json{{"model", model::to_json(c)}};
  TrainingState state{0, 0, 0, 1234, args};
  state.args = import_hf_tokenizer(dir, args, &state.tokenizer_files);  // carried into the checkpoint
  save_full_model(save_dir, state, std::vector<std::pair<std::string, Tensor>>(tessera.begin(), tessera.end()));
}

}  // namespace tessera::ckpt
