#include "model/config.h"

#include "core/check.h"

namespace tessera::model {

int64_t ModelConfig::parameter_count() const {
  int64_t h = hidden_size, bias = add_bias_linear ? 1 : 0;
  int64_t norm = normalization == Normalization::LayerNorm ? 2 * h : h;
  int64_t fc1_out = swiglu ? 2 * ffn_hidden_size : ffn_hidden_size;
  int64_t attn_out = num_attention_heads * kv_channels;
  int64_t layer = norm + qkv_size() * (h + bias) + h * (attn_out + bias) + norm + fc1_out * (h + bias) +
                  h * (ffn_hidden_size + bias);
  int64_t n = num_layers * layer + norm + padded_vocab_size * h + num_tokentypes * h;
  if (position_embedding == PositionEmbedding::LearnedAbsolute) n += max_position_embeddings * h;
  if (untie_embeddings_and_output_weights) n += padded_vocab_size * h;
  return n;
}

nlohmann::json to_json(const ModelConfig& c) {
  nlohmann::json j = {{"num_layers", c.num_layers},
          {"hidden_size", c.hidden_size},
          {"num_attention_heads", c.num_attention_heads},
          {"num_query_groups", c.num_query_groups},
          {"kv_channels", c.kv_channels},
          {"ffn_hidden_size", c.ffn_hidden_size},
          {"seq_length", c.seq_length},
          {"max_position_embeddings", c.max_position_embeddings},
          {"vocab_size", c.vocab_size},
          {"padded_vocab_size", c.padded_vocab_size},
          {"position_embedding_type", c.position_embedding == PositionEmbedding::Rope ? "rope" : "learned_absolute"},
          {"rotary_base", c.rotary_base},
          {"rotary_percent", c.rotary_percent},
          {"normalization", c.normalization == Normalization::RMSNorm ? "RMSNorm" : "LayerNorm"},
          {"norm_epsilon", c.norm_epsilon},
          {"swiglu", c.swiglu},
          {"untie_embeddings_and_output_weights", c.untie_embeddings_and_output_weights},
          {"add_bias_linear", c.add_bias_linear},
          {"hidden_dropout", c.hidden_dropout},
          {"attention_dropout", c.attention_dropout},
          {"init_method_std", c.init_method_std}};
  // Written only when they differ from GPT's, so that GPT checkpoints read as before.
  if (c.family != "gpt") j["model_family"] = c.family;
  if (c.num_tokentypes > 0) j["num_tokentypes"] = c.num_tokentypes;
  if (c.apply_residual_connection_post_layernorm) j["apply_residual_connection_post_layernorm"] = true;
  if (c.family == "bert") j["bert_binary_head"] = c.bert_binary_head;
  return j;
}

namespace {
// An integer field. A float is refused: nlohmann's get<int64_t> casts it, and a cast of 1e300 is undefined.
int64_t integer(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}))
    throw Error(str_cat("model configuration: ", key, " is ", v.dump(), ", not an integer"));
  return v.get<int64_t>();
}
}  // namespace

ModelConfig config_from_json(const nlohmann::json& j) {
  ModelConfig c;
  try {
    c.num_layers = integer(j, "num_layers");
    c.hidden_size = integer(j, "hidden_size");
    c.num_attention_heads = integer(j, "num_attention_heads");
    c.num_query_groups = integer(j, "num_query_groups");
    c.kv_channels = integer(j, "kv_channels");
    c.ffn_hidden_size = integer(j, "ffn_hidden_size");
    c.seq_length = integer(j, "seq_length");
    c.max_position_embeddings = integer(j, "max_position_embeddings");
    c.vocab_size = integer(j, "vocab_size");
    c.padded_vocab_size = integer(j, "padded_vocab_size");
    c.position_embedding =
        j.at("position_embedding_type") == "rope" ? PositionEmbedding::Rope : PositionEmbedding::LearnedAbsolute;
    c.rotary_base = j.at("rotary_base").get<float>();
    c.rotary_percent = j.at("rotary_percent").get<float>();
    c.normalization = j.at("normalization") == "RMSNorm" ? Normalization::RMSNorm : Normalization::LayerNorm;
    c.norm_epsilon = j.at("norm_epsilon").get<float>();
    c.swiglu = j.at("swiglu").get<bool>();
    c.untie_embeddings_and_output_weights = j.at("untie_embeddings_and_output_weights").get<bool>();
    c.add_bias_linear = j.at("add_bias_linear").get<bool>();
    c.hidden_dropout = j.at("hidden_dropout").get<float>();
    c.attention_dropout = j.at("attention_dropout").get<float>();
    c.init_method_std = j.at("init_method_std").get<float>();
    if (j.contains("model_family")) c.family = j.at("model_family").get<std::string>();
    if (j.contains("num_tokentypes")) c.num_tokentypes = integer(j, "num_tokentypes");
    if (j.contains("apply_residual_connection_post_layernorm"))
      c.apply_residual_connection_post_layernorm = j.at("apply_residual_connection_post_layernorm").get<bool>();
    if (j.contains("bert_binary_head")) c.bert_binary_head = j.at("bert_binary_head").get<bool>();
    if (c.num_tokentypes < 0) throw Error(str_cat("model configuration: num_tokentypes is ", c.num_tokentypes));
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat("model configuration: ", e.what()));
  }
  return c;
}

int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, int64_t tensor_parallel) {
  int64_t multiple = divisible_by * tensor_parallel;
  return (vocab + multiple - 1) / multiple * multiple;
}

double model_flops_per_iteration(const ModelConfig& c, int64_t batch) {
  double h = static_cast<double>(c.hidden_size);
  double query_projection_ratio = static_cast<double>(c.kv_channels * c.num_attention_heads) / h;
  double gated = c.swiglu ? 1.5 : 1.0;
  double groups_ratio = static_cast<double>(c.num_query_groups) / static_cast<double>(c.num_attention_heads);
  double seq = static_cast<double>(c.seq_length);
  return 12.0 * static_cast<double>(batch) * seq * static_cast<double>(c.num_layers) * h * h *
         ((1.0 + groups_ratio + seq / h) * query_projection_ratio +
          static_cast<double>(c.ffn_hidden_size) / h * gated +
          static_cast<double>(c.padded_vocab_size) / (2.0 * static_cast<double>(c.num_layers) * h));
}

}  // namespace tessera::model
