#include "ckpt/hf_config.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include <nlohmann/json.hpp>

#include "ckpt/hf_moe.h"
#include "core/check.h"

namespace tessera::ckpt {
using nlohmann::json;

// An integer field of config.json. A float, a bool or an unsigned value beyond int64 is an error (nlohmann's
// implicit conversion would cast a float such as 1e300 to an integer, which is undefined).
int64_t hf_int_field(const json& hf, const char* key) {
  const json& v = hf.at(key);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}))
    throw Error(str_cat("convert: config.json: ", key, " is ", v.dump(), ", not an integer"));
  return v.get<int64_t>();
}

namespace {

json parse_json(const std::string& text, const std::string& path) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(str_cat("convert: ", path, " is not valid JSON: ", e.what()));
  }
}

int64_t int_field(const json& hf, const char* key) { return hf_int_field(hf, key); }

// The rules the conversion relies on (it divides by heads and query groups, and sizes multiply into
// tensor shapes): every size positive, the parameter count representable.
void check_config(const model::ModelConfig& c, const std::string& path) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"num_layers", c.num_layers}, {"hidden_size", c.hidden_size}, {"num_attention_heads", c.num_attention_heads},
      {"num_query_groups", c.num_query_groups}, {"kv_channels", c.kv_channels},
      {"ffn_hidden_size", c.ffn_hidden_size}, {"seq_length", c.seq_length},
      {"max_position_embeddings", c.max_position_embeddings}, {"vocab_size", c.vocab_size},
      {"padded_vocab_size", c.padded_vocab_size}};
  for (const auto& [name, v] : sizes)
    TESSERA_CHECK(v >= 1 && v <= (int64_t{1} << 40), "convert: ", path, ": ", name, " = ", v,
                  " must be in [1, 2^40]");
  TESSERA_CHECK(c.num_attention_heads % c.num_query_groups == 0, "convert: ", path, ": num_attention_heads = ",
                c.num_attention_heads, " must be divisible by the ", c.num_query_groups, " query groups");
  const model::MoeConfig& m = c.moe;
  double expert_params = 0;  // every expert and router of every layer
  if (m.enabled()) {
    int64_t fewest = INT64_MAX;
    for (int64_t e : m.layer_experts) {
      TESSERA_CHECK(e >= 0 && e <= (int64_t{1} << 20), "convert: ", path, ": a layer's experts = ", e,
                    " must be in [0, 2^20]");
      if (e > 0) fewest = std::min(fewest, e);
      expert_params += static_cast<double>(e) * (3.0 * m.ffn_hidden_size + 1) * c.hidden_size;
    }
    TESSERA_CHECK(fewest != INT64_MAX, "convert: ", path, ": no layer has experts");
    TESSERA_CHECK(m.router.topk >= 1 && m.router.topk <= fewest, "convert: ", path, ": experts per token = ",
                  m.router.topk, " must be in [1, ", fewest, "]");
    TESSERA_CHECK(m.ffn_hidden_size >= 1 && m.ffn_hidden_size <= (int64_t{1} << 40), "convert: ", path,
                  ": the experts' intermediate size = ", m.ffn_hidden_size, " must be in [1, 2^40]");
    TESSERA_CHECK(m.aux_loss_coeff >= 0 && m.input_jitter_eps >= 0 && m.input_jitter_eps < 1, "convert: ", path,
                  ": router_aux_loss_coef = ", m.aux_loss_coeff, " must be >= 0 and router_jitter_noise = ",
                  m.input_jitter_eps, " in [0, 1)");
  }
  TESSERA_CHECK(c.padded_vocab_size >= c.vocab_size, "convert: ", path, ": padded_vocab_size = ",
                c.padded_vocab_size, " is below vocab_size = ", c.vocab_size);
  // ModelConfig::parameter_count in floating point first, so the int64 one cannot overflow.
  const double h = static_cast<double>(c.hidden_size), ffn = static_cast<double>(c.ffn_hidden_size);
  const double qkv = static_cast<double>(c.num_attention_heads + 2 * c.num_query_groups) * c.kv_channels;
  const double attn_out = static_cast<double>(c.num_attention_heads) * c.kv_channels;
  const double layer = 4 * h + qkv * (h + 1) + h * (attn_out + 1) + 2 * ffn * (h + 1) + h * (ffn + 1);
  const double params = static_cast<double>(c.num_layers) * layer + expert_params + 2 * h +
                        (2.0 * c.padded_vocab_size + c.max_position_embeddings) * h;
  TESSERA_CHECK(params < 0x1p53, "convert: ", path, ": a model of about ", params,
                " parameters is implausible (more than 2^53)");
}

// config.json's rope_scaling (Llama 3.x's "llama3", "linear"; null or "default": none) into c. Its type is
// "rope_type" (transformers since 4.43) or "type" (before); the other types change more than the
// frequencies (yarn and longrope scale the attention, dynamic depends on the length) and are refused.
void read_rope_scaling(const json& hf, model::ModelConfig& c) {
  if (!hf.contains("rope_scaling") || hf["rope_scaling"].is_null()) return;
  const json& s = hf["rope_scaling"];
  TESSERA_CHECK(s.is_object(), "convert: rope_scaling is ", s.dump(), ", not an object");
  const std::string type = s.value("rope_type", s.value("type", std::string("default")));
  if (type == "default") return;
  TESSERA_CHECK(type == "llama3" || type == "linear", "convert: rope_scaling type '", type,
                "' is not supported (Tessera has llama3 and linear)");
  c.rope_scaling_factor = s.at("factor").get<double>();
  if (type == "linear") {
    c.rope_scaling = model::RopeScaling::Linear;
    return;
  }
  c.rope_scaling = model::RopeScaling::Llama3;
  c.rope_low_freq_factor = s.at("low_freq_factor").get<double>();
  c.rope_high_freq_factor = s.at("high_freq_factor").get<double>();
  c.rope_original_max_position = int_field(s, "original_max_position_embeddings");
}

// The Tessera configuration of a Hugging Face config.json (its "tessera_args" when it has them).
model::ModelConfig tessera_config(const json& hf, HfFamily f, bool binary_head, const std::string& path) {
  if (hf.contains("tessera_args") && hf["tessera_args"].contains("model")) {
    model::ModelConfig c = model::config_from_json(hf["tessera_args"]["model"]);
    if (f == HfFamily::Bert || f == HfFamily::MegatronBert) {
      // The architecture decides the layout of the tensors: the recorded run must be the same model.
      TESSERA_CHECK(c.family == "bert" && c.apply_residual_connection_post_layernorm == (f == HfFamily::Bert) &&
                        c.bert_binary_head == binary_head,
                    "convert: ", path, ": tessera_args describe a ", c.family, " model that is not its architecture");
    }
    // config.json's own fields must describe the same model: an edit of them (n_layer, n_positions,
    // vocab_size, ...) was silently overridden by the recorded run.
    json fields = hf;
    fields.erase("tessera_args");
    const model::ModelConfig own = tessera_config(fields, f, binary_head, path);
    const auto agree = [&](const char* what, int64_t recorded, int64_t given) {
      TESSERA_CHECK(recorded == given, "convert: ", path, ": its fields give ", given, " ", what, " but its tessera_args ",
                    recorded, " (edit both, or remove tessera_args)");
    };
    agree("layers", c.num_layers, own.num_layers);
    agree("as the hidden size", c.hidden_size, own.hidden_size);
    agree("attention heads", c.num_attention_heads, own.num_attention_heads);
    agree("query groups", c.num_query_groups, own.num_query_groups);
    agree("positions", c.max_position_embeddings, own.max_position_embeddings);
    agree("as the (padded) vocabulary size", c.padded_vocab_size, own.padded_vocab_size);
    if (!c.moe.enabled()) agree("as the FFN size", c.ffn_hidden_size, own.ffn_hidden_size);  // MoE: the experts
    return c;
  }
  model::ModelConfig c;
  try {
    if (f == HfFamily::Bert || f == HfFamily::MegatronBert) {
      c.family = "bert";
      c.num_layers = int_field(hf, "num_hidden_layers");
      c.hidden_size = int_field(hf, "hidden_size");
      c.num_attention_heads = c.num_query_groups = int_field(hf, "num_attention_heads");
      c.ffn_hidden_size = int_field(hf, "intermediate_size");
      c.max_position_embeddings = c.seq_length = int_field(hf, "max_position_embeddings");
      c.norm_epsilon = hf.value("layer_norm_eps", 1e-12f);
      c.hidden_dropout = hf.value("hidden_dropout_prob", 0.1f);
      c.attention_dropout = hf.value("attention_probs_dropout_prob", 0.1f);
      c.apply_residual_connection_post_layernorm = f == HfFamily::Bert;
      c.bert_binary_head = binary_head;
      c.num_tokentypes = binary_head ? 2 : 0;
      const std::string act = hf.value("hidden_act", "gelu");
      TESSERA_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", "convert: BERT hidden_act '", act,
                    "' is not the tanh GELU Tessera implements (gelu_new, gelu_pytorch_tanh)");
      const std::string pos = hf.value("position_embedding_type", "absolute");
      TESSERA_CHECK(pos == "absolute", "convert: BERT position_embedding_type '", pos, "' is not supported");
      if (binary_head) {
        const int64_t types = hf.contains("type_vocab_size") ? int_field(hf, "type_vocab_size") : 2;
        TESSERA_CHECK(types == 2, "convert: BERT with the sentence-order head has 2 token types, not ", types);
      }
      TESSERA_CHECK(hf.value("tie_word_embeddings", true), "convert: BERT's decoder is tied to the word embeddings");
    } else if (f == HfFamily::Gpt2) {
      c.num_layers = int_field(hf, "n_layer");
      c.hidden_size = int_field(hf, "n_embd");
      c.num_attention_heads = c.num_query_groups = int_field(hf, "n_head");
      c.ffn_hidden_size = hf.value("n_inner", json()).is_number() ? int_field(hf, "n_inner") : 4 * c.hidden_size;
      c.max_position_embeddings = c.seq_length = int_field(hf, "n_positions");
      c.norm_epsilon = hf.value("layer_norm_epsilon", 1e-5f);
      c.hidden_dropout = hf.value("resid_pdrop", 0.1f);
      c.attention_dropout = hf.value("attn_pdrop", 0.1f);
      std::string act = hf.value("activation_function", "gelu_new");
      TESSERA_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", "convert: GPT-2 activation_function '", act,
                    "' is not the tanh GELU Tessera implements");
    } else {
      // Llama, Mixtral, Qwen3 (dense and MoE) and DeepSeek-V3, with the defaults of their transformers
      // configuration classes.
      const bool mixtral = f == HfFamily::Mixtral, qwen3 = f == HfFamily::Qwen3 || f == HfFamily::Qwen3Moe;
      const bool deepseek = f == HfFamily::DeepseekV3 || f == HfFamily::DeepseekV2;
      c.num_layers = int_field(hf, "num_hidden_layers");
      c.hidden_size = int_field(hf, "hidden_size");
      c.num_attention_heads = int_field(hf, "num_attention_heads");
      c.num_query_groups = hf.contains("num_key_value_heads") ? int_field(hf, "num_key_value_heads")
                           : mixtral                          ? 8
                                                              : c.num_attention_heads;
      c.ffn_hidden_size = int_field(hf, "intermediate_size");
      c.max_position_embeddings = c.seq_length = int_field(hf, "max_position_embeddings");
      c.norm_epsilon = hf.value("rms_norm_eps", mixtral ? 1e-5f : 1e-6f);
      c.rotary_base = hf.value("rope_theta", mixtral ? 1e6f : 10000.0f);
      c.position_embedding = model::PositionEmbedding::Rope;
      c.normalization = model::Normalization::RMSNorm;
      c.swiglu = true;
      c.untie_embeddings_and_output_weights = !hf.value("tie_word_embeddings", false);
      if (!deepseek) read_rope_scaling(hf, c);  // DeepSeek's (YaRN) is its attention's: read_deepseek_v3_config
      c.hidden_dropout = 0.0f;
      c.attention_dropout = hf.value("attention_dropout", 0.0f);
      if (qwen3) {
        // Qwen3: RMSNorm over each head's query and key; biases on q/k/v/o at most (its MLP has none).
        c.qk_layernorm = true;
        TESSERA_CHECK(!hf.value("attention_bias", false),
                      "convert: Qwen3 attention_bias without MLP biases; Tessera has one --disable-bias-linear");
        c.add_bias_linear = false;
        TESSERA_CHECK(!hf.value("use_sliding_window", false),
                      "convert: Qwen3 use_sliding_window; Tessera has no sliding-window attention");
        if (f == HfFamily::Qwen3Moe) read_qwen3_moe_config(hf, c);
      } else if (deepseek) {
        c.add_bias_linear = false;
        read_deepseek_config(hf, c, f == HfFamily::DeepseekV2);
      } else if (!mixtral) {
        c.add_bias_linear = hf.value("attention_bias", false);
        TESSERA_CHECK(hf.value("attention_bias", false) == hf.value("mlp_bias", false),
                      "convert: attention_bias and mlp_bias differ; Tessera has one --disable-bias-linear");
      } else {
        c.add_bias_linear = false;  // Mixtral has no biases
        // A window at least the context long is full causal attention, which is what Tessera has.
        const json window = hf.value("sliding_window", json());
        TESSERA_CHECK(window.is_null() || int_field(hf, "sliding_window") >= c.max_position_embeddings,
                      "convert: sliding_window ", window.dump(), " is shorter than max_position_embeddings ",
                      c.max_position_embeddings, "; Tessera has no sliding-window attention");
        // layer_experts has one entry per layer: bound them before allocating (check_config checks the rest).
        TESSERA_CHECK(c.num_layers >= 1 && c.num_layers <= (int64_t{1} << 20), "convert: ", path,
                      ": num_hidden_layers = ", c.num_layers, " must be in [1, 2^20]");
        const int64_t experts = hf.contains("num_local_experts") ? int_field(hf, "num_local_experts") : 8;
        c.moe.layer_experts.assign(static_cast<size_t>(c.num_layers), experts);
        c.moe.ffn_hidden_size = c.ffn_hidden_size;
        c.moe.router.topk = hf.contains("num_experts_per_tok") ? int_field(hf, "num_experts_per_tok") : 2;
        c.moe.aux_loss_coeff = hf.value("router_aux_loss_coef", 0.001f);
        c.moe.input_jitter_eps = hf.value("router_jitter_noise", 0.0f);
      }
    }
    TESSERA_CHECK(c.hidden_size >= 1 && c.num_attention_heads >= 1, "convert: ", path, ": hidden size ",
                  c.hidden_size, " and attention heads ", c.num_attention_heads, " must be positive");
    if (f != HfFamily::DeepseekV3 && f != HfFamily::DeepseekV2)  // DeepSeek's head_dim is the RoPE part's
      c.kv_channels = hf.value("head_dim", json()).is_number() ? int_field(hf, "head_dim")
                                                                : c.hidden_size / c.num_attention_heads;
    c.vocab_size = c.padded_vocab_size = int_field(hf, "vocab_size");
    c.init_method_std = hf.value("initializer_range", 0.02f);
  } catch (const json::exception& e) {
    throw Error(str_cat("convert: config.json: ", e.what()));
  }
  return c;
}

// The family config.json's "architectures" names.
HfFamily architecture_of(const json& hf, const std::string& path, bool& binary_head) {
  std::string arch;
  if (hf.contains("architectures") && hf["architectures"].is_array() && !hf["architectures"].empty() &&
      hf["architectures"][0].is_string())
    arch = hf["architectures"][0].get<std::string>();
  if (arch == "GPT2LMHeadModel") return HfFamily::Gpt2;
  if (arch == "LlamaForCausalLM") return HfFamily::Llama;
  if (arch == "MixtralForCausalLM") return HfFamily::Mixtral;
  if (arch == "Qwen3ForCausalLM") return HfFamily::Qwen3;
  if (arch == "Qwen3MoeForCausalLM") return HfFamily::Qwen3Moe;
  if (arch == "DeepseekV3ForCausalLM") return HfFamily::DeepseekV3;
  if (arch == "DeepseekV2ForCausalLM") return HfFamily::DeepseekV2;
  binary_head = arch == "BertForPreTraining" || arch == "MegatronBertForPreTraining";
  if (arch == "BertForPreTraining" || arch == "BertForMaskedLM") return HfFamily::Bert;
  if (arch == "MegatronBertForPreTraining" || arch == "MegatronBertForMaskedLM") return HfFamily::MegatronBert;
  throw Error(str_cat("convert: ", path, ": architecture '", arch,
                      "' is not GPT2LMHeadModel, LlamaForCausalLM, MixtralForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
                      "DeepseekV3ForCausalLM, DeepseekV2ForCausalLM, BertForPreTraining, "
                      "BertForMaskedLM, MegatronBertForPreTraining or MegatronBertForMaskedLM"));
}

}  // namespace

HfConfig parse_hf_config(const std::string& text, const std::string& path) {
  const json hf = parse_json(text, path);
  TESSERA_CHECK(hf.is_object(), "convert: ", path, " is not a JSON object");
  bool binary_head = false;
  const HfFamily family = architecture_of(hf, path, binary_head);
  const model::ModelConfig c = tessera_config(hf, family, binary_head, path);
  check_config(c, path);
  return {family, c};
}

std::vector<std::string> parse_hf_shard_index(const std::string& text, const std::string& path) {
  const json index = parse_json(text, path);
  TESSERA_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), "convert: ",
                path, " has no weight_map");
  std::vector<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) {
    const std::string f = file.is_string() ? file.get<std::string>() : "";
    TESSERA_CHECK(!f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
                      f.find('\0') == std::string::npos,
                  "convert: ", path, " maps ", name, " to a bad file name ", file.dump());
    if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
  }
  return files;
}

}  // namespace tessera::ckpt
