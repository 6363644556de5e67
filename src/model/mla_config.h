// Multi-Latent Attention's hyper-parameters (DeepSeek-V2/V3; Megatron-Core's MLATransformerConfig and
// its flags --multi-latent-attention, --q-lora-rank, --kv-lora-rank, --qk-head-dim,
// --qk-pos-emb-head-dim, --v-head-dim, --rope-type, --rotary-scaling-factor, --mscale, --mscale-all-dim
// and the YaRN --yarn-* corrections), a part of ModelConfig. model/multi_latent_attention.h is the layer.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "kernels/math/rotary.h"

namespace tessera::model {

struct MlaConfig {
  bool enabled = false;          // --multi-latent-attention: every layer's attention is MLA
  int64_t q_lora_rank = 0;       // 0 (Megatron's None): no query compression, linear_q_proj (V2-Lite)
  int64_t kv_lora_rank = 32;     // Megatron's argparse default
  int64_t qk_head_dim = 128;     // each head's query/key part without RoPE
  int64_t qk_pos_emb_head_dim = 64;  // the RoPE part (one key head shared by all heads)
  int64_t v_head_dim = 128;
  // --rope-type: yarn (Megatron's default for MLA) or rope. YaRN with --rotary-scaling-factor 1 is rope.
  bool yarn = true;
  double rotary_scaling_factor = 1.0;  // --rotary-scaling-factor (YaRN's factor)
  double mscale = 1.0, mscale_all_dim = 0.0;
  double beta_fast = 32.0, beta_slow = 1.0;        // --yarn-beta-fast, --yarn-beta-slow
  int64_t original_max_position_embeddings = 4096;  // --yarn-original-max-position-embeddings

  int64_t q_head_dim() const { return qk_head_dim + qk_pos_emb_head_dim; }
  // The RoPE frequencies of the qk_pos_emb_head_dim part (rope: unscaled).
  kernels::math::RopeScaling rope_scaling() const;
  // YaRN's factor on the rotated vectors' cos and sin: mscale(factor, mscale) / mscale(factor,
  // mscale_all_dim) (1 for rope).
  double rope_mscale() const;
  // The attention's softmax scale, DeepSeek's: mscale(factor, mscale_all_dim)^2 / sqrt(q_head_dim).
  double softmax_scale() const;
};

nlohmann::json mla_to_json(const MlaConfig& m);
MlaConfig mla_from_json(const nlohmann::json& j);
// The MLA fields' rules (positive ranks, an even RoPE part, finite YaRN values): an Error naming the field.
void validate_mla(const MlaConfig& m);
// One layer's attention parameters (without the input norm), for ModelConfig::parameter_count.
int64_t mla_attention_parameters(const MlaConfig& m, int64_t hidden, int64_t heads, bool bias, bool layernorm_norms,
                                 bool qk_layernorm);

}  // namespace tessera::model
