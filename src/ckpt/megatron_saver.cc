#include "ckpt/megatron_saver.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string_view>
#include <tuple>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_layout.h"
#include "ckpt/megatron_names.h"
#include "ckpt/megatron_rng.h"
#include "ckpt/torch_save.h"
#include "core/file_io.h"
#include "model/model_factory.h"

namespace tessera::ckpt {
namespace fs = std::filesystem;
namespace {

using PickleKind = PickleOut::Kind;  // (torch_file.cc has a PK of its own: one unity batch)

// Rank `rank` of `ranks`'s shard of a whole tensor split as `split` (megatron_names.h), the inverse of
// megatron_legacy.cc's merge.
Tensor megatron_shard(const Tensor& whole, MegatronSplit split, int64_t rank, int64_t ranks) {
  switch (split) {
    case MegatronSplit::Replicated:
      return whole;
    case MegatronSplit::Rows: {
      const int64_t n = whole.shape()[0] / ranks;
      return hf_layout::rows(whole, rank * n, n);
    }
    case MegatronSplit::GatedRows: {  // whole is [gate; up]: rank r holds [gate_r; up_r]
      const int64_t half = whole.shape()[0] / 2, n = half / ranks;
      return hf_layout::concat_rows({hf_layout::rows(whole, rank * n, n), hf_layout::rows(whole, half + rank * n, n)});
    }
    case MegatronSplit::Columns: {
      const int64_t rows = whole.shape()[0], cols = whole.shape()[1] / ranks;
      Tensor out = Tensor::empty({rows, cols});
      for (int64_t i = 0; i < rows; ++i)
        std::copy(whole.host_f32() + i * whole.shape()[1] + rank * cols,
                  whole.host_f32() + i * whole.shape()[1] + (rank + 1) * cols, out.host_f32() + i * cols);
      return out;
    }
  }
  return whole;
}

// The word embeddings (or output layer, or BERT's output bias) with `rows` rows: Tessera's padding cut or
// extended with zeros.
Tensor repad_vocabulary(const Tensor& t, int64_t rows) {
  if (t.shape()[0] == rows) return t;
  const int64_t width = t.shape().size() > 1 ? t.shape()[1] : 1;
  Tensor out = Tensor::zeros(t.shape().size() > 1 ? Shape{rows, width} : Shape{rows});
  const int64_t keep = std::min(rows, t.shape()[0]) * width;
  std::copy(t.host_f32(), t.host_f32() + keep, out.host_f32());
  return out;
}

// The legacy model's state-dict path of a Megatron-Core name (the inverse of megatron_key): nested
// dicts language_model -> embedding / encoder / output_layer (a BERT's: pooler), the encoder's keys flat;
// a BERT's heads beside language_model: lm_head {bias, dense.*, norm.*} and binary_head.
std::vector<std::string> legacy_path(const std::string& name, bool tied_copy) {
  if (tied_copy) return {"word_embeddings_for_head", "weight"};
  for (const char* table : {"word_embeddings", "position_embeddings", "tokentype_embeddings"})
    if (name == str_cat("embedding.", table, ".weight")) return {"language_model", "embedding", table, "weight"};
  if (name == "output_layer.weight") return {"language_model", "output_layer", "weight"};
  if (name == "output_layer.bias") return {"lm_head", "bias"};  // BERT's vocabulary-parallel output bias
  if (name.rfind("lm_head.layer_norm.", 0) == 0) return {"lm_head", "norm." + name.substr(19)};
  if (name.rfind("lm_head.", 0) == 0) return {"lm_head", name.substr(8)};
  if (name.rfind("binary_head.", 0) == 0) return {"binary_head", name.substr(12)};
  if (name.rfind("pooler.", 0) == 0) return {"language_model", "pooler", name.substr(7)};
  for (const char* final_norm : {"decoder.final_layernorm.", "encoder.final_layernorm."})
    if (name.rfind(final_norm, 0) == 0)
      return {"language_model", "encoder", "final_norm." + name.substr(std::string(final_norm).size())};
  const MegatronKey k = megatron_key(name);
  static const std::pair<std::string, std::string> renames[] = {
      {"input_layernorm.", "input_norm."},
      {"self_attention.linear_qkv.", "self_attention.query_key_value."},
      {"self_attention.linear_proj.", "self_attention.dense."},
      {"pre_mlp_layernorm.", "post_attention_norm."},
      {"mlp.linear_fc1.", "mlp.dense_h_to_4h."},
      {"mlp.linear_fc2.", "mlp.dense_4h_to_h."},
  };
  std::string rest = k.rest;
  for (const auto& [from, to] : renames)
    if (rest.rfind(from, 0) == 0) rest = to + rest.substr(from.size());
  return {"language_model", "encoder", str_cat("layers.", k.layer, ".", rest)};
}

// Puts `value` at `path` in nested state dicts (created as needed; Megatron's are OrderedDicts).
void put_nested(PickleOut& dict, const std::vector<std::string>& path, size_t at, PickleOut value) {
  if (at + 1 == path.size()) {
    dict.set(path[at], std::move(value));
    return;
  }
  for (auto& [key, child] : dict.entries)
    if (key == path[at]) return put_nested(child, path, at + 1, std::move(value));
  dict.set(path[at], PickleOut::dict(PickleKind::OrderedDict));
  put_nested(dict.entries.back().second, path, at + 1, std::move(value));
}

// Where a tensor comes in Megatron's state dict, which follows the modules' order: the embedding, each
// layer's input norm, attention (QKV, projection), pre-MLP norm and MLP (fc1, fc2), the final norm, the
// output layer (Tessera declares a layer's norms first). Only for files that read as Megatron's do.
// A BERT's last stage then has Megatron-Core's BertModel order: the LM head (dense, norm), the output layer,
// the binary head, the pooler.
std::tuple<int, int64_t, int> megatron_order(const std::string& name) {
  if (name.rfind("embedding.", 0) == 0)
    return {0, 0, name.find("word_embeddings") != std::string::npos ? 0 : name.find("position") != std::string::npos ? 1 : 2};
  if (name.rfind("decoder.final_layernorm.", 0) == 0 || name.rfind("encoder.final_layernorm.", 0) == 0) return {2, 0, 0};
  if (name.rfind("mtp.", 0) == 0) return {2, 1, 0};  // GPTModel's mtp comes after the decoder (declaration order within)
  if (name.rfind("lm_head.", 0) == 0) return {3, 0, name.rfind("lm_head.dense.", 0) == 0 ? 0 : 1};
  if (name.rfind("output_layer.", 0) == 0) return {4, 0, 0};
  if (name.rfind("binary_head.", 0) == 0) return {5, 0, 0};
  if (name.rfind("pooler.", 0) == 0) return {6, 0, 0};
  const MegatronKey k = megatron_key(name);
  static const char* const parts[] = {"input_layernorm.", "self_attention.linear_qkv.", "self_attention.linear_proj.",
                                      "pre_mlp_layernorm.", "mlp.linear_fc1.", "mlp.linear_fc2."};
  int part = 6;
  for (int i = 0; i < 6; ++i)
    if (k.rest.rfind(parts[i], 0) == 0) part = i;
  return {1, k.layer, part};
}

struct SaveLayout {
  int64_t tp = 1, pp = 1, ep = 1, layers_per_stage = 0, padded_vocab = 0;
  int64_t experts = 0;  // per MoE layer (0: a dense model)
  DType stored = DType::F32;
};

// A mixture of experts' Megatron arguments (the --num-experts and --moe-* flags megatron_args.cc reads).
void add_moe_args(PickleOut& a, const model::MoeConfig& m, int64_t num_layers, const SaveLayout& l) {
  // moe_layer_freq as Megatron's interval where one gives the pattern, else as the list (1 for each MoE
  // layer, the MTP modules' layers left out): its type decides torch_dist's keys (megatron_stacks_layers).
  PickleOut freq = PickleOut::none();
  if (const int64_t every = megatron_moe_interval(m, num_layers); every > 0) {
    freq = PickleOut::int_of(every);
  } else {
    std::vector<PickleOut> pattern;
    for (int64_t i = 0; i < num_layers; ++i) pattern.push_back(PickleOut::int_of(m.layer_experts[i] > 0 ? 1 : 0));
    freq = PickleOut::list(std::move(pattern));
  }
  const char* balancing = m.load_balancing == model::LoadBalancing::None         ? "none"
                          : m.load_balancing == model::LoadBalancing::SeqAuxLoss ? "seq_aux_loss"
                                                                                 : "aux_loss";
  auto I = PickleOut::int_of;
  auto F = [](double v) { return PickleOut::float_of(v); };
  a.set("moe_layer_freq", std::move(freq))
      .set("moe_ffn_hidden_size", I(m.ffn_hidden_size))
      .set("moe_router_topk", I(m.router.topk))
      .set("moe_router_score_function",
           PickleOut::str(m.router.score == kernels::RouterScoreFunction::Sigmoid ? "sigmoid" : "softmax"))
      .set("moe_router_pre_softmax", PickleOut::boolean_of(m.router.pre_softmax))
      .set("moe_router_topk_scaling_factor", F(model::json_float(m.router.scaling_factor)))
      .set("moe_router_num_groups", m.router.num_groups > 0 ? I(m.router.num_groups) : PickleOut::none())
      .set("moe_router_group_topk", m.router.group_topk > 0 ? I(m.router.group_topk) : PickleOut::none())
      .set("moe_router_enable_expert_bias", PickleOut::boolean_of(m.expert_bias))
      .set("moe_router_load_balancing_type", PickleOut::str(balancing))
      .set("moe_aux_loss_coeff", F(model::json_float(m.aux_loss_coeff)))
      .set("moe_z_loss_coeff", m.z_loss_coeff > 0 ? F(model::json_float(m.z_loss_coeff)) : PickleOut::none())
      .set("moe_input_jitter_eps", m.input_jitter_eps > 0 ? F(model::json_float(m.input_jitter_eps)) : PickleOut::none())
      .set("moe_expert_capacity_factor", m.capacity_factor >= 0 ? F(m.capacity_factor) : PickleOut::none())
      .set("moe_token_drop_policy",
           PickleOut::str(m.token_drop_policy == kernels::TokenDropPolicy::Position ? "position" : "probs"))
      .set("moe_pad_expert_input_to_capacity", PickleOut::boolean_of(m.pad_expert_input_to_capacity))
      .set("moe_grouped_gemm", PickleOut::boolean_of(false))  // SequentialMLP's per-expert keys are written
      .set("moe_shared_expert_intermediate_size",
           m.shared_expert_intermediate_size > 0 ? I(m.shared_expert_intermediate_size) : PickleOut::none())
      .set("expert_tensor_parallel_size", I(l.tp));
}

// The global expert of a layer's key part "mlp.experts.local_experts.G...." (Tessera's), or -1.
int64_t expert_of(const std::string& rest) {
  static constexpr std::string_view kLocal = "mlp.experts.local_experts.";
  if (rest.compare(0, kLocal.size(), kLocal) != 0) return -1;
  return std::stoll(rest.substr(kLocal.size(), rest.find('.', kLocal.size()) - kLocal.size()));
}

// The Namespace of Megatron arguments that describe this model at this layout: those Megatron's
// load_args_from_checkpoint and check_checkpoint_args read, and its converters' loaders (and
// megatron_args.cc) need.
PickleOut megatron_args_namespace(const model::ModelConfig& c, const nlohmann::json& saved, const TrainingState& state,
                        const SaveLayout& l, int64_t divisible_by) {
  auto I = PickleOut::int_of;
  auto B = PickleOut::boolean_of;
  auto F = PickleOut::float_of;
  auto S = PickleOut::str;
  const std::string tokenizer = saved.value("tokenizer_type", std::string());
  const bool rope = c.position_embedding == model::PositionEmbedding::Rope;
  const bool gqa = c.num_query_groups != c.num_attention_heads;
  auto path_or_none = [&](const char* key) {
    const std::string p = saved.value(key, std::string());
    return p.empty() ? PickleOut::none() : S(p);
  };
  PickleOut a = PickleOut::dict(PickleKind::Namespace);
  a.set("num_layers", I(c.num_layers))
      .set("hidden_size", I(c.hidden_size))
      .set("ffn_hidden_size", I(c.ffn_hidden_size))
      .set("num_attention_heads", I(c.num_attention_heads))
      .set("kv_channels", I(c.kv_channels))
      .set("group_query_attention", B(gqa))
      .set("num_query_groups", gqa ? I(c.num_query_groups) : PickleOut::none())
      .set("seq_length", I(c.seq_length))
      .set("max_position_embeddings", I(c.max_position_embeddings))
      .set("position_embedding_type", S(rope ? "rope" : "learned_absolute"))
      .set("add_position_embedding", B(!rope))
      .set("use_rotary_position_embeddings", B(rope))
      .set("rotary_base", I(static_cast<int64_t>(c.rotary_base)))
      .set("rotary_percent", F(c.rotary_percent))
      .set("rotary_interleaved", B(false))
      .set("normalization", S(c.normalization == model::Normalization::RMSNorm ? "RMSNorm" : "LayerNorm"))
      .set("norm_epsilon", F(static_cast<double>(model::json_float(c.norm_epsilon))))
      .set("apply_layernorm_1p", B(false))
      .set("swiglu", B(c.swiglu))
      .set("squared_relu", B(false))
      // Tessera's GELU is the tanh form, Megatron's --openai-gelu.
      .set("openai_gelu", B(!c.swiglu))
      .set("add_bias_linear", B(c.add_bias_linear))
      .set("add_qkv_bias", B(c.add_bias_linear))
      .set("untie_embeddings_and_output_weights", B(c.untie_embeddings_and_output_weights))
      .set("apply_residual_connection_post_layernorm", B(c.apply_residual_connection_post_layernorm))
      .set("apply_query_key_layer_scaling", B(false))
      .set("hidden_dropout", F(model::json_float(c.hidden_dropout)))
      .set("attention_dropout", F(model::json_float(c.attention_dropout)))
      .set("init_method_std", F(model::json_float(c.init_method_std)))
      .set("num_experts", l.experts > 0 ? I(l.experts) : PickleOut::none())
      .set("expert_model_parallel_size", I(l.ep))
      .set("bert_binary_head", B(c.family != "bert" || c.bert_binary_head))
      .set("tokenizer_type", tokenizer.empty() ? PickleOut::none() : S(tokenizer))
      .set("vocab_file", path_or_none("vocab_file"))
      .set("merge_file", path_or_none("merge_file"))
      .set("tokenizer_model", path_or_none("tokenizer_model"))
      // NullTokenizer's --vocab-size: its ids run to that value (the end of document), one more token.
      .set("vocab_size", tokenizer == "NullTokenizer" ? I(c.vocab_size - 1) : PickleOut::none())
      .set("make_vocab_size_divisible_by", I(divisible_by))
      .set("padded_vocab_size", I(l.padded_vocab))
      .set("tensor_model_parallel_size", I(l.tp))
      .set("pipeline_model_parallel_size", I(l.pp))
      .set("virtual_pipeline_model_parallel_size", PickleOut::none())
      .set("num_layers_per_virtual_pipeline_stage", PickleOut::none())
      .set("data_parallel_size", I(1))
      .set("fp16", B(l.stored == DType::F16))
      .set("bf16", B(l.stored == DType::BF16))
      .set("params_dtype", torch_dtype_value(l.stored))
      .set("iteration", I(state.iteration))
      .set("consumed_train_samples", I(state.consumed_train_samples))
      .set("skipped_train_samples", I(std::max<int64_t>(0, state.skipped_train_samples)))
      .set("consumed_valid_samples", I(0))
      .set("seed", I(static_cast<int64_t>(state.seed)))
      .set("ckpt_format", S("torch"))
      .set("use_mcore_models", B(true));
  if (l.experts > 0) add_moe_args(a, c.moe, c.num_layers, l);
  a.set("qk_layernorm", B(c.qk_layernorm))
      .set("multi_latent_attention", B(c.mla.enabled))
      .set("mtp_num_layers", c.mtp_num_layers > 0 ? I(c.mtp_num_layers) : PickleOut::none())
      .set("mtp_loss_scaling_factor", F(model::json_float(c.mtp_loss_scaling_factor)));
  if (c.mla.enabled) {  // MLATransformerConfig's fields, under the names megatron_args.cc reads
    const model::MlaConfig& m = c.mla;
    a.set("q_lora_rank", m.q_lora_rank > 0 ? I(m.q_lora_rank) : PickleOut::none())
        .set("kv_lora_rank", I(m.kv_lora_rank))
        .set("qk_head_dim", I(m.qk_head_dim))
        .set("qk_pos_emb_head_dim", I(m.qk_pos_emb_head_dim))
        .set("v_head_dim", I(m.v_head_dim))
        .set("rope_type", S(m.yarn ? "yarn" : "rope"))
        .set("rotary_scaling_factor", F(m.rotary_scaling_factor))
        .set("mscale", F(m.mscale))
        .set("mscale_all_dim", F(m.mscale_all_dim))
        .set("beta_fast", F(m.beta_fast))
        .set("beta_slow", F(m.beta_slow))
        .set("original_max_position_embeddings", I(m.original_max_position_embeddings));
  }
  return a;
}

}  // namespace

int64_t megatron_moe_interval(const model::MoeConfig& m, int64_t num_layers) {
  // Megatron's int N makes layer i (0-based) an MoE layer when i % N == 0: layer 0 must be one, and the
  // first MoE layer after it is the N-th (none: N = num_layers does).
  if (num_layers == 0 || m.layer_experts.empty() || m.layer_experts[0] == 0) return 0;
  int64_t every = 1;
  while (every < num_layers && m.layer_experts[static_cast<size_t>(every)] == 0) ++every;
  for (int64_t i = 0; i < num_layers; ++i)
    if ((m.layer_experts[static_cast<size_t>(i)] > 0) != (i % every == 0)) return 0;
  return every;
}

bool megatron_stacks_layers(const model::ModelConfig& c) {
  return !c.moe.enabled() || megatron_moe_interval(c.moe, c.num_layers) == 1;
}

Tensor megatron_tensor_shard(const Tensor& whole, MegatronSplit split, int64_t rank, int64_t ranks) {
  return megatron_shard(whole, split, rank, ranks);
}

MegatronExport prepare_megatron_export(const std::string& load_dir, const MegatronSaveOptions& o) {
  TrainingState state;
  std::vector<std::pair<std::string, Tensor>> full = load_full_model(load_dir, &state);
  TESSERA_CHECK(state.args.contains("model"), "convert: checkpoint ", load_dir, " records no model configuration");
  const model::ModelConfig c = model::config_from_json(state.args["model"]);
  TESSERA_CHECK(c.family == "gpt" || c.family == "bert", "convert --saver megatron: ", load_dir, " holds a ",
                c.family, " model; only GPT and BERT models are written as Megatron checkpoints");
  TESSERA_CHECK(!o.legacy_names || (c.mtp_num_layers == 0 && !c.mla.enabled), "convert --saver megatron: "
                "--megatron-names legacy: multi-latent attention and multi-token prediction are written under "
                "Megatron-Core's names only");
  SaveLayout l;
  l.tp = o.tensor_parallel;
  l.pp = o.pipeline_parallel;
  l.ep = o.expert_parallel;
  TESSERA_CHECK(l.tp >= 1 && l.pp >= 1 && l.ep >= 1, "convert --saver megatron: the target sizes must be positive");
  // A mixture of experts as Megatron-Core's MoE layers: the same experts in every MoE layer (Megatron's args
  // have one --num-experts), no shared experts nor DeepSpeed's residual form (no Megatron keys map them).
  for (const int64_t e : c.moe.layer_experts) {
    TESSERA_CHECK(e == 0 || l.experts == 0 || e == l.experts, "convert --saver megatron: ", load_dir, " has layers with ",
                  l.experts, " and ", e, " experts (a pyramid): Megatron's args have one --num-experts");
    if (e > 0) l.experts = e;
  }
  TESSERA_CHECK(l.experts > 0 || l.ep == 1, "convert --saver megatron: --target-expert-parallel-size ", l.ep,
                " for a model without experts");
  const auto divides_tp = [&](int64_t n, const char* what) {
    TESSERA_CHECK(n % l.tp == 0, "convert --saver megatron: ", what, " (", n,
                  ") is not divisible by --target-tensor-parallel-size ", l.tp);
  };
  if (l.experts > 0) {
    TESSERA_CHECK(!c.moe.residual, "convert --saver megatron: ", load_dir,
                  " has the residual MoE form, which is not written as Megatron keys");
    divides_tp(c.moe.shared_expert_intermediate_size, "moe_shared_expert_intermediate_size");
    TESSERA_CHECK(!o.legacy_names, "convert --saver megatron: --megatron-names legacy: a mixture of experts is written "
                  "under Megatron-Core's names only");
    TESSERA_CHECK(l.experts % l.ep == 0, "convert --saver megatron: num_experts (", l.experts,
                  ") is not divisible by --target-expert-parallel-size ", l.ep);
    TESSERA_CHECK(c.moe.ffn_hidden_size % l.tp == 0, "convert --saver megatron: moe_ffn_hidden_size (",
                  c.moe.ffn_hidden_size, ") is not divisible by --target-tensor-parallel-size ", l.tp);
  }
  auto divides = [&](int64_t n, const char* what, int64_t by, const char* flag) {
    TESSERA_CHECK(n % by == 0, "convert --saver megatron: ", what, " (", n, ") is not divisible by ", flag, " ", by);
  };
  divides(c.num_attention_heads, "num_attention_heads", l.tp, "--target-tensor-parallel-size");
  divides(c.num_query_groups, "num_query_groups", l.tp, "--target-tensor-parallel-size");
  divides(c.ffn_hidden_size, "ffn_hidden_size", l.tp, "--target-tensor-parallel-size");
  divides(c.num_layers, "num_layers", l.pp, "--target-pipeline-parallel-size");
  l.layers_per_stage = c.num_layers / l.pp;
  // Megatron pads the tokenizer's vocabulary to a multiple of --make-vocab-size-divisible-by x tp.
  const int64_t divisible_by = state.args.value("make_vocab_size_divisible_by", int64_t{128});
  l.padded_vocab = model::padded_vocab_size(c.vocab_size, divisible_by, l.tp);
  l.stored = state.args.value("bf16", false) ? DType::BF16 : state.args.value("fp16", false) ? DType::F16 : DType::F32;

  // The tensors in the model's declaration order (embedding, layers, final norm, output layer).
  std::map<std::string, Tensor> by_name(full.begin(), full.end());
  full.clear();
  model::ParameterSet declared;
  model::build_model_chunk(c, declared);
  MegatronExport x;
  for (const model::Parameter& p : declared.params()) {
    const std::string& name = p.spec.name;
    const auto it = by_name.find(name);
    TESSERA_CHECK(it != by_name.end(), "convert: checkpoint ", load_dir, " has no ", name, ", which its model has");
    Tensor t = it->second;
    TESSERA_CHECK(t.dtype() == DType::F32, "convert: ", name, " is ", dtype_name(t.dtype()), ", not fp32");
    const bool vocabulary =
        name == "embedding.word_embeddings.weight" || name == "output_layer.weight" || name == "output_layer.bias";
    if (vocabulary) t = repad_vocabulary(t, l.padded_vocab);
    x.tensors.emplace_back(name, t);
  }
  x.config = c;
  x.state = state;
  x.tp = l.tp, x.pp = l.pp, x.ep = l.ep, x.padded_vocab = l.padded_vocab, x.experts = l.experts, x.stored = l.stored;
  x.args = megatron_args_namespace(c, state.args, state, l, divisible_by);
  for (auto& [key, value] : x.args.entries)
    if (key == "ckpt_format") value = PickleOut::str(o.torch_dist ? "torch_dist" : "torch");
  return x;
}

std::vector<std::string> export_megatron_legacy(const std::string& load_dir, const std::string& save_dir,
                                                const MegatronSaveOptions& o) {
  MegatronExport ex = prepare_megatron_export(load_dir, o);
  const model::ModelConfig& c = ex.config;
  const TrainingState& state = ex.state;
  SaveLayout l;
  l.tp = ex.tp, l.pp = ex.pp, l.ep = ex.ep, l.padded_vocab = ex.padded_vocab, l.experts = ex.experts, l.stored = ex.stored;
  l.layers_per_stage = c.num_layers / l.pp;
  const int64_t local_experts = l.experts / l.ep;
  struct Placed {
    std::string name;  // Megatron-Core's, with the stage's local layer index
    Tensor whole;
    MegatronSplit split;
    bool tied_copy = false;
    int64_t expert = -1;  // a mixture of experts: the global expert this tensor is of
  };
  std::vector<std::vector<Placed>> stages(static_cast<size_t>(l.pp));
  Placed tied_copy;
  for (auto& [name, t] : ex.tensors) {
    const MegatronSplit split = megatron_split(name, c.swiglu);
    const MegatronKey k = megatron_key(name);
    if (k.layer >= 0) {
      const int64_t stage = k.layer / l.layers_per_stage;
      // A BERT's stack is Megatron-Core's BertModel "encoder" (megatron_key names every stack "decoder").
      stages[stage].push_back(
          {str_cat(c.family == "bert" ? "encoder" : "decoder", ".layers.", k.layer % l.layers_per_stage, ".", k.rest), t,
           split, false, expert_of(k.rest)});
    } else if (name.rfind("embedding.", 0) == 0) {
      stages[0].push_back({name, t, split});
    } else {
      stages[l.pp - 1].push_back({name, t, split});
    }
    // A tied model's last stage (when it is not the first) computes the logits with its own copy of the
    // word embeddings: Megatron-Core's output_layer.weight, the legacy model's word_embeddings_for_head.
    if (name == "embedding.word_embeddings.weight" && !c.untie_embeddings_and_output_weights && l.pp > 1)
      tied_copy = {"output_layer.weight", t, split, /*tied_copy=*/true};
    // Multi-token prediction on the last stage embeds the shifted tokens (at the shifted positions) there:
    // its own copy of the embedding, as Megatron-Core's embedding on an mtp_process stage.
    if ((name == "embedding.word_embeddings.weight" || name == "embedding.position_embeddings.weight") &&
        c.mtp_num_layers > 0 && l.pp > 1)
      stages[l.pp - 1].push_back({name, t, split});
  }
  if (tied_copy.whole.defined()) stages[l.pp - 1].push_back(tied_copy);  // last, where the output layer is
  for (std::vector<Placed>& stage : stages)  // stable: a weight stays before its bias
    std::stable_sort(stage.begin(), stage.end(), [](const Placed& a, const Placed& b) {
      return megatron_order(a.name) < megatron_order(b.name);
    });

  const std::string iteration = iteration_dir_name(state.iteration);
  const PickleOut& args = ex.args;
  for (int64_t p = 0; p < l.pp; ++p) {
    for (int64_t t = 0; t < l.tp; ++t) {
     for (int64_t e = 0; e < l.ep; ++e) {
      TorchSaveWriter writer;
      PickleOut model = PickleOut::dict(PickleKind::OrderedDict);
      for (const Placed& x : stages[p]) {
        // Expert rank e holds the dense tensors and its experts, numbered locally as Megatron-Core's
        // SequentialMLP numbers them (local_experts.L, L = G - e * E/ep).
        std::string name = x.name;
        if (x.expert >= 0) {
          if (x.expert / local_experts != e) continue;
          const std::string global = str_cat("local_experts.", x.expert, ".");
          name.replace(name.find(global), global.size(), str_cat("local_experts.", x.expert % local_experts, "."));
        }
        PickleOut tensor = writer.tensor(megatron_shard(x.whole, x.split, t, l.tp), l.stored);
        if (o.legacy_names) put_nested(model, legacy_path(name, x.tied_copy), 0, std::move(tensor));
        else model.set(name, std::move(tensor));
      }
      PickleOut root = PickleOut::dict();
      root.set("args", args)
          .set("checkpoint_version", PickleOut::float_of(3.0))
          .set("iteration", PickleOut::int_of(state.iteration))
          .set("model", std::move(model))
          // The experts are split over the tensor ranks as a dense MLP (expert-tensor rank = tensor rank).
          .set("rng_state", megatron_rng_state(state.seed, p, t, e, t, writer));
      // mp_rank_TT, then _PPP with pipeline stages and _EEE with expert ranks (Megatron's get_checkpoint_name).
      std::string rank = str_cat("mp_rank_", t < 10 ? "0" : "", t);
      const auto three = [](int64_t n) { return str_cat("_", n < 10 ? "00" : n < 100 ? "0" : "", n); };
      if (l.pp > 1) rank += three(p);
      if (l.ep > 1) rank += three(e);
      const fs::path dir = fs::path(save_dir) / iteration / rank;
      fs::create_directories(dir);
      writer.write((dir / "model_optim_rng.pt").string(), root);
     }
    }
  }
  write_file_atomically((fs::path(save_dir) / "latest_checkpointed_iteration.txt").string(),
                        std::to_string(state.iteration));
  std::vector<std::string> notes = {
      str_cat("the weights, the model's arguments and each rank's RNG state as Megatron seeds a run of seed ", state.seed,
              " are written; the optimizer state is not (load it in Megatron with --no-load-optim, or --finetune)")};
  if (l.padded_vocab != c.padded_vocab_size)
    notes.push_back(str_cat("the vocabulary (", c.vocab_size, " tokens) is padded to ", l.padded_vocab,
                            " rows for tensor size ", l.tp, " (Tessera's checkpoint had ", c.padded_vocab_size, ")"));
  return notes;
}

}  // namespace tessera::ckpt
