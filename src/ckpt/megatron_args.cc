#include "ckpt/megatron_args.h"

#include <cmath>

#include "core/check.h"

namespace tessera::ckpt {

// As torch_file.cc (an alias of the same type may be declared again: the layer builds as unity batches).
using SK = StateNode::Kind;
namespace {


// Reads the Namespace's attributes; a missing attribute and Python's None are the same to Megatron
// (getattr(args, name, None)), so both give the default.
class MegatronNamespace {
 public:
  MegatronNamespace(const StateNode& ns, const std::string& where) : ns_(ns), where_(where) {}

  const StateNode* get(const char* name) const {
    const StateNode* v = ns_.find(name);
    return v && !v->is(SK::None) ? v : nullptr;
  }
  int64_t integer(const char* name) const {
    const StateNode* v = get(name);
    TESSERA_CHECK(v, where_, ": args has no ", name, " (a Megatron checkpoint records it)");
    return as_integer(*v, name);
  }
  int64_t integer_or(const char* name, int64_t fallback) const {
    const StateNode* v = get(name);
    return v ? as_integer(*v, name) : fallback;
  }
  double real_or(const char* name, double fallback) const {
    const StateNode* v = get(name);
    if (!v) return fallback;
    if (v->is(SK::Float)) return v->real;
    if (v->is(SK::Int)) return static_cast<double>(v->integer);
    throw Error(str_cat(where_, ": args.", name, " is a ", state_kind_name(v->kind), ", not a number"));
  }
  bool flag(const char* name, bool fallback = false) const {
    const StateNode* v = get(name);
    if (!v) return fallback;
    TESSERA_CHECK(v->is(SK::Bool), where_, ": args.", name, " is a ", state_kind_name(v->kind), ", not a bool");
    return v->boolean;
  }
  std::string text_or(const char* name, const std::string& fallback) const {
    const StateNode* v = get(name);
    if (!v) return fallback;
    TESSERA_CHECK(v->is(SK::String), where_, ": args.", name, " is a ", state_kind_name(v->kind), ", not a string");
    return v->text;
  }
  // A setting Tessera's GPT has no counterpart for: refused by its argument name.
  void refuse_if(bool set, const char* name, const std::string& why) const {
    TESSERA_CHECK(!set, where_, ": the checkpoint was trained with args.", name, " set: ", why);
  }
  const std::string& where() const { return where_; }

 private:
  int64_t as_integer(const StateNode& v, const char* name) const {
    // Python's bool is an int; Megatron never stores a size as one, so it is refused.
    TESSERA_CHECK(v.is(SK::Int), where_, ": args.", name, " is a ", state_kind_name(v.kind), ", not an integer");
    return v.integer;
  }
  const StateNode& ns_;
  std::string where_;
};

// Positions, rotary embeddings and norms: Tessera has learned absolute positions or rotate-half RoPE
// over a fraction of each head, and LayerNorm or RMSNorm with a plain gamma.
void read_positions_and_norms(const MegatronNamespace& a, model::ModelConfig& c) {
  // Megatron before --position-embedding-type had --use-rotary-position-embeddings (and
  // --no-position-embedding, add_position_embedding = False, which no Tessera model lacks).
  std::string pos = a.text_or("position_embedding_type", a.flag("use_rotary_position_embeddings") ? "rope" : "learned_absolute");
  a.refuse_if(!a.flag("add_position_embedding", true) && pos == "learned_absolute", "add_position_embedding",
              "= False (no position embedding), which Tessera's GPT does not support");
  TESSERA_CHECK(pos == "learned_absolute" || pos == "rope", a.where(), ": args.position_embedding_type is '", pos,
                "'; Tessera supports learned_absolute and rope");
  c.position_embedding = pos == "rope" ? model::PositionEmbedding::Rope : model::PositionEmbedding::LearnedAbsolute;
  c.rotary_base = static_cast<float>(a.real_or("rotary_base", 10000));
  c.rotary_percent = a.real_or("rotary_percent", 1.0);
  if (c.position_embedding == model::PositionEmbedding::Rope) {
    // Tessera's RoPE pairs dimension i with i + d/2 (Megatron's default); the interleaved form pairs
    // neighbours. The scalings change only the frequencies: Llama 3.x's (Megatron's fixed bands, which
    // are ModelConfig's defaults) or linear, one at a time as Tessera's flags allow.
    a.refuse_if(a.flag("rotary_interleaved"), "rotary_interleaved", "Tessera's RoPE is the rotate-half form");
    const double interpolation = a.real_or("rotary_seq_len_interpolation_factor", 1);
    a.refuse_if(a.flag("use_rope_scaling") && interpolation != 1, "rotary_seq_len_interpolation_factor",
                "beside use_rope_scaling; Tessera applies one scaling at a time");
    if (a.flag("use_rope_scaling")) {
      c.rope_scaling = model::RopeScaling::Llama3;
      c.rope_scaling_factor = a.real_or("rope_scaling_factor", 8.0);
    } else if (interpolation != 1) {
      c.rope_scaling = model::RopeScaling::Linear;
      c.rope_scaling_factor = interpolation;
    }
  }
  const std::string norm = a.text_or("normalization", "LayerNorm");
  TESSERA_CHECK(norm == "LayerNorm" || norm == "RMSNorm", a.where(), ": args.normalization is '", norm,
                "'; Tessera supports LayerNorm and RMSNorm");
  c.normalization = norm == "RMSNorm" ? model::Normalization::RMSNorm : model::Normalization::LayerNorm;
  // norm_epsilon since 2023; layernorm_epsilon before.
  c.norm_epsilon = static_cast<float>(a.real_or("norm_epsilon", a.real_or("layernorm_epsilon", 1e-5)));
  a.refuse_if(a.flag("apply_layernorm_1p"), "apply_layernorm_1p",
              "its norms scale by 1 + gamma (zero-centred), Tessera's by gamma");
  // With multi-latent attention the norms are the latents' (q_layernorm, kv_layernorm), mapped by
  // megatron_names.cc; the per-head query/key norms of other models are not mapped yet.
  c.qk_layernorm = a.flag("qk_layernorm");
  a.refuse_if(c.qk_layernorm && !a.flag("multi_latent_attention"), "qk_layernorm",
              "without multi_latent_attention: its per-head q/k norms are not converted yet");
}

// Multi-Latent Attention (Megatron-Core's MLATransformerConfig): the ranks and head dimensions, and its RoPE
// (YaRN unless rope_type says rope). Missing attributes take Megatron's argparse defaults.
void read_mla(const MegatronNamespace& a, model::ModelConfig& c) {
  model::MlaConfig& m = c.mla;
  m.enabled = a.flag("multi_latent_attention");
  if (!m.enabled) return;
  m.q_lora_rank = a.integer_or("q_lora_rank", 0);  // None: no query compression (linear_q_proj)
  m.kv_lora_rank = a.integer_or("kv_lora_rank", 32);
  m.qk_head_dim = a.integer_or("qk_head_dim", 128);
  m.qk_pos_emb_head_dim = a.integer_or("qk_pos_emb_head_dim", 64);
  m.v_head_dim = a.integer_or("v_head_dim", 128);
  const std::string rope = a.text_or("rope_type", "yarn");
  TESSERA_CHECK(rope == "yarn" || rope == "rope", a.where(), ": args.rope_type is '", rope, "'; Tessera's MLA has yarn and rope");
  m.yarn = rope == "yarn";
  m.rotary_scaling_factor = a.real_or("rotary_scaling_factor", 1.0);
  m.mscale = a.real_or("mscale", 1.0);
  m.mscale_all_dim = a.real_or("mscale_all_dim", 0.0);
  m.beta_fast = a.real_or("yarn_beta_fast", a.real_or("beta_fast", 32.0));
  m.beta_slow = a.real_or("yarn_beta_slow", a.real_or("beta_slow", 1.0));
  m.original_max_position_embeddings = a.integer_or(
      "yarn_original_max_position_embeddings", a.integer_or("original_max_position_embeddings", 4096));
  model::validate_mla(m);
}

// The MLP and the biases.
void read_mlp(const MegatronNamespace& a, model::ModelConfig& c, std::vector<std::string>& notes) {
  c.swiglu = a.flag("swiglu");
  a.refuse_if(a.flag("squared_relu"), "squared_relu", "Tessera's MLP is GELU or SwiGLU");
  a.refuse_if(a.flag("quick_geglu"), "quick_geglu", "Tessera's MLP is GELU or SwiGLU");
  c.add_bias_linear = a.flag("add_bias_linear", true);
  // Megatron sets add_qkv_bias whenever add_bias_linear; alone it adds a QKV bias to a bias-free model.
  a.refuse_if(a.flag("add_qkv_bias") && !c.add_bias_linear, "add_qkv_bias",
              "a QKV bias without the other linear biases (--disable-bias-linear); Tessera has one bias switch");
  // Multi-token prediction: mtp.layers.K.{enorm,hnorm,eh_proj,transformer_layer.*,final_layernorm}.
  c.mtp_num_layers = a.integer_or("mtp_num_layers", 0);
  c.mtp_loss_scaling_factor = static_cast<float>(a.real_or("mtp_loss_scaling_factor", 0.1));
  // Megatron's GELU is the tanh form only where it fuses the bias into it (bias_gelu_fusion, on by
  // default, with biases) or under --openai-gelu; otherwise torch's exact erf GELU. Tessera's is the tanh
  // form: the weights convert, the outputs differ slightly.
  if (!c.swiglu && !a.flag("openai_gelu") && !(a.flag("bias_gelu_fusion", true) && c.add_bias_linear))
    notes.push_back("the checkpoint's MLP used the exact (erf) GELU; Tessera's is the tanh approximation, so the "
                    "converted model's outputs differ slightly (of the order of 1e-3 per activation)");
}

// Mixture of experts (Megatron-Core's MoELayer): the experts per layer and the router. Shared experts and an
// expert tensor-parallel size other than the tensor-parallel one are refused: their keys and splits are not
// mapped (megatron_names.h).
void read_moe(const MegatronNamespace& a, MegatronArgs& out) {
  model::ModelConfig& c = out.config;
  model::MoeConfig& m = c.moe;
  out.expert_parallel = a.integer_or("expert_model_parallel_size", 1);
  const int64_t experts = a.integer_or("num_experts", 0);
  if (experts == 0) return;  // None or 0: a dense model
  TESSERA_CHECK(experts > 0, a.where(), ": args.num_experts is ", experts, ", not a positive number");
  // moe_layer_freq: every N-th layer (an int), or a list of 0/1 per layer.
  std::vector<int64_t> pattern;
  if (const StateNode* freq = a.get("moe_layer_freq"); freq && (freq->is(SK::List) || freq->is(SK::Tuple))) {
    for (const StateNode& x : freq->items) {
      TESSERA_CHECK(x.is(SK::Int) && (x.integer == 0 || x.integer == 1), a.where(),
                    ": args.moe_layer_freq holds a value other than 0 or 1");
      pattern.push_back(x.integer);
    }
    TESSERA_CHECK(static_cast<int64_t>(pattern.size()) == c.num_layers, a.where(), ": args.moe_layer_freq lists ",
                  pattern.size(), " layers, num_layers is ", c.num_layers);
  } else {
    const int64_t every = a.integer_or("moe_layer_freq", 1);
    TESSERA_CHECK(every > 0, a.where(), ": args.moe_layer_freq is ", every, ", not a positive number");
    for (int64_t l = 0; l < c.num_layers; ++l) pattern.push_back(l % every == 0 ? 1 : 0);
  }
  for (const int64_t p : pattern) m.layer_experts.push_back(p ? experts : 0);
  m.ffn_hidden_size = a.integer_or("moe_ffn_hidden_size", c.ffn_hidden_size);
  m.router.topk = a.integer_or("moe_router_topk", 2);
  const std::string score = a.text_or("moe_router_score_function", "softmax");
  TESSERA_CHECK(score == "softmax" || score == "sigmoid", a.where(), ": args.moe_router_score_function is '", score,
                "'; Tessera's router scores by softmax or sigmoid");
  m.router.score = score == "sigmoid" ? kernels::RouterScoreFunction::Sigmoid : kernels::RouterScoreFunction::Softmax;
  m.router.pre_softmax = a.flag("moe_router_pre_softmax");
  m.router.scaling_factor = static_cast<float>(a.real_or("moe_router_topk_scaling_factor", 1.0));
  m.router.num_groups = a.integer_or("moe_router_num_groups", 0);
  m.router.group_topk = a.integer_or("moe_router_group_topk", 0);
  m.expert_bias = a.flag("moe_router_enable_expert_bias");
  const std::string balancing = a.text_or("moe_router_load_balancing_type", "aux_loss");
  TESSERA_CHECK(balancing == "aux_loss" || balancing == "seq_aux_loss" || balancing == "none", a.where(),
                ": args.moe_router_load_balancing_type is '", balancing, "'; Tessera has aux_loss, seq_aux_loss and none");
  m.load_balancing = balancing == "none"           ? model::LoadBalancing::None
                     : balancing == "seq_aux_loss" ? model::LoadBalancing::SeqAuxLoss
                                                   : model::LoadBalancing::AuxLoss;
  m.aux_loss_coeff = static_cast<float>(a.real_or("moe_aux_loss_coeff", 0.0));
  m.z_loss_coeff = static_cast<float>(a.real_or("moe_z_loss_coeff", 0.0));
  m.input_jitter_eps = static_cast<float>(a.real_or("moe_input_jitter_eps", 0.0));
  m.capacity_factor = a.real_or("moe_expert_capacity_factor", -1.0);
  const std::string drop = a.text_or("moe_token_drop_policy", "probs");
  TESSERA_CHECK(drop == "probs" || drop == "position", a.where(), ": args.moe_token_drop_policy is '", drop,
                "'; Tessera has probs and position");
  m.token_drop_policy = drop == "position" ? kernels::TokenDropPolicy::Position : kernels::TokenDropPolicy::Probs;
  m.pad_expert_input_to_capacity = a.flag("moe_pad_expert_input_to_capacity");
  m.grouped_gemm = a.flag("moe_grouped_gemm");
  // A shared expert is a dense MLP beside the routed ones (mlp.shared_experts.linear_fc1/fc2), split as one.
  m.shared_expert_intermediate_size = a.integer_or("moe_shared_expert_intermediate_size", 0);
  a.refuse_if(a.flag("moe_shared_expert_gate"), "moe_shared_expert_gate", "Tessera's shared expert has no gate");
  // The experts' own tensor-parallel size (Megatron's MoE parallel folding): the legacy reader refuses one
  // other than the tensor-parallel size; torch_dist's global keys read at any.
  out.expert_tensor_parallel = a.integer_or("expert_tensor_parallel_size", a.integer_or("tensor_model_parallel_size", 1));
}

}  // namespace

MegatronArgs read_megatron_args(const StateNode& args, const std::string& where) {
  TESSERA_CHECK(args.is(SK::Object) && !args.entries.empty(), where, " is a ", state_kind_name(args.kind),
                args.is(SK::Object) ? " (" + args.text + ") without attributes" : std::string(),
                ", not Megatron's argparse.Namespace");
  const MegatronNamespace a(args, where);
  MegatronArgs out;
  model::ModelConfig& c = out.config;
  c.family = "gpt";
  c.num_layers = a.integer("num_layers");
  c.hidden_size = a.integer("hidden_size");
  c.num_attention_heads = a.integer("num_attention_heads");
  TESSERA_CHECK(c.num_attention_heads > 0 && c.hidden_size > 0, where, ": args.num_attention_heads = ",
                c.num_attention_heads, " and hidden_size = ", c.hidden_size, " must be positive");
  c.kv_channels = a.integer_or("kv_channels", c.hidden_size / c.num_attention_heads);
  out.group_query_attention = a.flag("group_query_attention");
  c.num_query_groups = out.group_query_attention ? a.integer("num_query_groups") : c.num_attention_heads;
  c.seq_length = a.integer("seq_length");
  c.max_position_embeddings = a.integer_or("max_position_embeddings", c.seq_length);
  read_positions_and_norms(a, c);
  read_mla(a, c);
  read_mlp(a, c, out.notes);
  // validate_args fills ffn_hidden_size; an older checkpoint may lack it (Megatron's rule then).
  c.ffn_hidden_size = a.integer_or(
      "ffn_hidden_size", c.swiglu ? static_cast<int64_t>(4.0 * static_cast<double>(c.hidden_size) * 2 / 3 / 64) * 64
                                  : 4 * c.hidden_size);
  c.untie_embeddings_and_output_weights = a.flag("untie_embeddings_and_output_weights");
  c.apply_residual_connection_post_layernorm = a.flag("apply_residual_connection_post_layernorm");
  c.hidden_dropout = static_cast<float>(a.real_or("hidden_dropout", 0.1));
  c.attention_dropout = static_cast<float>(a.real_or("attention_dropout", 0.1));
  c.init_method_std = static_cast<float>(a.real_or("init_method_std", 0.02));
  read_moe(a, out);

  // The vocabulary: Megatron records the padded size it built the embedding with (build_tokenizer sets
  // args.padded_vocab_size); 0 here means "from the embedding's shape" (the importer fills it in).
  c.padded_vocab_size = a.integer_or("padded_vocab_size", 0);
  out.make_vocab_size_divisible_by = a.integer_or("make_vocab_size_divisible_by", 128);
  out.tokenizer_type = a.text_or("tokenizer_type", "");
  out.vocab_file = a.text_or("vocab_file", "");
  out.merge_file = a.text_or("merge_file", "");
  out.tokenizer_model = a.text_or("tokenizer_model", "");
  if (out.tokenizer_type == "NullTokenizer") out.null_vocab_size = a.integer_or("vocab_size", -1);
  // Megatron's NullTokenizer has ids 0..vocab_size (the last its end of document), as Tessera's.
  c.vocab_size = out.null_vocab_size > 0 ? out.null_vocab_size + 1 : c.padded_vocab_size;

  out.tensor_parallel = a.integer_or("tensor_model_parallel_size", 1);
  out.pipeline_parallel = a.integer_or("pipeline_model_parallel_size", 1);
  out.virtual_pipeline = a.integer_or("virtual_pipeline_model_parallel_size", 1);
  out.consumed_train_samples = a.integer_or("consumed_train_samples", -1);
  out.seed = a.integer_or("seed", -1);
  out.bert_binary_head = a.flag("bert_binary_head", true);
  out.openai_gelu = a.flag("openai_gelu");
  out.fp16 = a.flag("fp16");
  out.bf16 = a.flag("bf16");
  return out;
}

void set_megatron_bert(MegatronArgs& a, const std::string& where) {
  model::ModelConfig& c = a.config;
  TESSERA_CHECK(!c.moe.enabled(), where, ": a BERT with mixture-of-experts layers (args.num_experts) is not converted");
  TESSERA_CHECK(c.position_embedding == model::PositionEmbedding::LearnedAbsolute, where,
                ": a BERT with args.position_embedding_type rope; Megatron's and Tessera's BERT use learned_absolute");
  TESSERA_CHECK(!c.untie_embeddings_and_output_weights, where, ": a BERT with args.untie_embeddings_and_output_weights; "
                "Megatron's and Tessera's BERT tie the output layer to the word embeddings");
  c.family = "bert";
  c.bert_binary_head = a.bert_binary_head;
  c.num_tokentypes = a.bert_binary_head ? 2 : 0;  // Megatron's pretrain_bert: segments only with the binary head
  // Megatron's BertLMHead applies torch's exact (erf) GELU unless --openai-gelu; Tessera's is the tanh form.
  if (!a.openai_gelu)
    a.notes.push_back("the checkpoint's masked-LM head used the exact (erf) GELU; Tessera's is the tanh "
                      "approximation, so the converted model's outputs differ slightly");
}

}  // namespace tessera::ckpt
