// The model's hyper-parameters, named as Megatron-LM's flags (--num-layers, --hidden-size, ...).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/dtype.h"
#include "model/mla_config.h"
#include "model/moe_config.h"

namespace tessera::model {

enum class PositionEmbedding { LearnedAbsolute, Rope };
enum class Normalization { LayerNorm, RMSNorm };
// RoPE's frequency scaling (kernels/math/rotary.h has the formulas): none, linear (Hugging Face's
// "linear", Megatron's --rotary-seq-len-interpolation-factor) or Llama 3.x's (--use-rope-scaling).
enum class RopeScaling { None, Linear, Llama3 };

struct ModelConfig {
  // The model family build_model_chunk makes (model/model_factory.h): "gpt" unless another is registered.
  std::string family = "gpt";
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_attention_heads = 0;
  int64_t num_query_groups = 0;  // == num_attention_heads unless grouped-query attention
  int64_t kv_channels = 0;       // head dimension
  int64_t ffn_hidden_size = 0;
  int64_t seq_length = 0;
  int64_t max_position_embeddings = 0;
  int64_t vocab_size = 0;         // the tokenizer's
  int64_t padded_vocab_size = 0;  // rounded up to --make-vocab-size-divisible-by
  int64_t num_tokentypes = 0;     // token-type embeddings (BERT's segments); 0: none
  PositionEmbedding position_embedding = PositionEmbedding::LearnedAbsolute;
  float rotary_base = 10000.0f;
  double rotary_percent = 1.0;  // a double, as Python's: int(kv_channels * rotary_percent) truncates
  RopeScaling rope_scaling = RopeScaling::None;
  double rope_scaling_factor = 8.0;  // Megatron's --rope-scaling-factor default (Llama 3.1's)
  // Llama 3.x's bands; Megatron fixes them at Llama 3.1's values, a Hugging Face config may set them.
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_position = 8192;
  // Megatron's --qk-layernorm: a norm of `normalization`'s type over each head's query and key (weights
  // of kv_channels, shared by the heads) before RoPE, as Qwen3 and OLMo 2 have.
  bool qk_layernorm = false;
  Normalization normalization = Normalization::LayerNorm;
  float norm_epsilon = 1e-5f;
  bool swiglu = false;
  bool untie_embeddings_and_output_weights = false;
  bool add_bias_linear = true;
  // The original BERT ordering (Megatron's --apply-residual-connection-post-layernorm): each residual is
  // taken from its norm's output, z = norm1(x), h = z + attention(z), u = norm2(h), y = u + mlp(u).
  bool apply_residual_connection_post_layernorm = false;
  // BERT: the pooler and the sentence-order head, with two token types (false: --bert-no-binary-head).
  bool bert_binary_head = true;
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float init_method_std = 0.02f;
  MlaConfig mla;  // --multi-latent-attention: every layer's attention is MLA (model/multi_latent_attention.h)
  MoeConfig moe;  // mixture of experts in the feed-forward slots (empty: a dense model)
  // Multi-token prediction (DeepSeek-V3's MTP, Megatron-Core's --mtp-num-layers and
  // --mtp-loss-scaling-factor): this many MTP modules after the last layer, module k predicting the token
  // k + 1 ahead (model/multi_token_prediction.h); 0: none.
  int64_t mtp_num_layers = 0;
  float mtp_loss_scaling_factor = 0.1f;
  // Mixed precision (Megatron's params_dtype under --bf16/--fp16): the type that GEMM inputs and
  // attention's q, k, v are rounded to (kernels/precision.h); parameters and gradients stay fp32, the
  // parameters being the master copy. A run setting: not part of the JSON a checkpoint records.
  DType params_dtype = DType::F32;

  int64_t query_heads_per_group() const { return num_attention_heads / num_query_groups; }
  int64_t qkv_size() const { return (num_attention_heads + 2 * num_query_groups) * kv_channels; }
  // Floats a generating model caches per position, all layers and tensor ranks together: each query
  // group's key and value, or Multi-Latent Attention's one compressed row (latent and RoPE key).
  int64_t kv_cache_floats_per_position() const {
    return num_layers * (mla.enabled ? mla.kv_lora_rank + mla.qk_pos_emb_head_dim : 2 * num_query_groups * kv_channels);
  }
  int64_t rotary_dim() const {
    return static_cast<int64_t>(static_cast<double>(kv_channels) * rotary_percent) / 2 * 2;
  }
  // Every parameter of the model, every expert counted.
  int64_t parameter_count() const;
};

// A float field as JSON writes it: the shortest decimal that reads back as the same float (0.1, not the
// double 0.10000000149011612 that the float widens to), so configuration files read as they were given.
double json_float(float v);

// The configuration as JSON (recorded in checkpoints, so a checkpoint says which model it holds).
nlohmann::json to_json(const ModelConfig& c);
// Throws an Error naming the missing or malformed field (validate_config's rules included).
ModelConfig config_from_json(const nlohmann::json& j);
// Every field within what a model can be (positive sizes below 2^31, heads a multiple of the query
// groups, finite epsilons, ...): a configuration read from a file is checked before anything is sized
// by it, so a damaged one is an Error naming the field, not an allocation that exhausts the machine.
void validate_config(const ModelConfig& c);

// Megatron's vocabulary padding: the smallest multiple of divisible_by * tensor_parallel >= vocab.
int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, int64_t tensor_parallel);

// Megatron's num_floating_point_operations for one iteration (forward + backward) of `batch` samples.
double model_flops_per_iteration(const ModelConfig& c, int64_t batch);

}  // namespace tessera::model
