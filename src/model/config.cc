#include "model/config.h"

namespace tessera::model {

int64_t GptConfig::parameter_count() const {
  int64_t h = hidden_size, bias = add_bias_linear ? 1 : 0;
  int64_t norm = normalization == Normalization::LayerNorm ? 2 * h : h;
  int64_t fc1_out = swiglu ? 2 * ffn_hidden_size : ffn_hidden_size;
  int64_t attn_out = num_attention_heads * kv_channels;
  int64_t layer = norm + qkv_size() * (h + bias) + h * (attn_out + bias) + norm + fc1_out * (h + bias) +
                  h * (ffn_hidden_size + bias);
  int64_t n = num_layers * layer + norm + padded_vocab_size * h;
  if (position_embedding == PositionEmbedding::LearnedAbsolute) n += max_position_embeddings * h;
  if (untie_embeddings_and_output_weights) n += padded_vocab_size * h;
  return n;
}

int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, int64_t tensor_parallel) {
  int64_t multiple = divisible_by * tensor_parallel;
  return (vocab + multiple - 1) / multiple * multiple;
}

double model_flops_per_iteration(const GptConfig& c, int64_t batch) {
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
