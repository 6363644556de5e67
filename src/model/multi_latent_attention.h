// Multi-Latent Attention (DeepSeek-V2/V3; Megatron-Core's MLASelfAttention) on one rank. The query is
// projected directly (linear_q_proj, --q-lora-rank 0) or through a latent (linear_q_down_proj, its
// q_layernorm under --qk-layernorm, linear_q_up_proj); the keys and values come from one latent
// (linear_kv_down_proj gives kv_lora_rank latent columns and one shared RoPE key of
// qk_pos_emb_head_dim, kv_layernorm, linear_kv_up_proj gives each head's no-RoPE key and value). Each
// head's query and key are [no-RoPE part (qk_head_dim) | RoPE part (qk_pos_emb_head_dim)], the RoPE
// key head broadcast over the heads; the RoPE parts are DeepSeek's interleaved dimensions, taken as
// Megatron does (evens then odds, then rotate_half), with YaRN frequencies and mscale by default. The
// causal attention runs over heads of max(q_head_dim, v_head_dim) (the narrower side zero-padded), with
// DeepSeek's softmax scale, and linear_proj maps the heads' values back.
//
// Tensor parallelism splits the heads: the up projections are column-parallel, linear_proj
// row-parallel, and the down projections (and their norms) are replicated. Without sequence parallelism
// every rank computes the whole latents (their gradients arrive summed over the group); with it each
// rank projects its own rows, whose latents the up projections gather, and the down projections' and
// norms' weight gradients are partial sums over the group (ParameterSpec::sequence_parallel_grad).
//
// Incremental decoding caches one compressed row per position, shared by the heads: the normed latent and
// the rotated RoPE key (kv_lora_rank + qk_pos_emb_head_dim floats a layer, not the heads' keys and
// values). Each head's no-RoPE query is taken into the latent's space through its rows of
// linear_kv_up_proj (q W_uk: the "absorbed" form of DeepSeek-V2's paper), so the heads attend to the
// cached rows as one key/value head, and the values' part of the result goes back through W_uv.
// Context parallelism runs the same heads around the ring (model/ring_attention.h), the RoPE parts rotated
// at the rank's two chunks' global positions. Token slices (TeraPipe, model/token_sliced_chunk.h) cache each
// head's up-projected key and value of the earlier slices (model/token_slice_attention.h), the RoPE parts
// rotated at their global positions: heads x 2 x max(q_head_dim, v_head_dim) floats a position and layer,
// more than the compressed row decoding caches, but no up projection is recomputed per slice.
#pragma once

#include <memory>

#include "model/modules.h"
#include "model/sublayer.h"

namespace tessera::model {

class MultiLatentAttention final : public Sublayer {
 public:
  MultiLatentAttention(const ModelConfig& config, int64_t layer_number, const std::string& prefix,
                       ParameterSet& params, const parallel::TensorParallelContext& tp);

  std::unique_ptr<SavedTensors> make_record() const override;
  Tensor forward(const Tensor& x, bool x_rounded, const SublayerContext& sc, SavedTensors& rec) const override;
  Tensor backward(const Tensor& dy, const Tensor& x, bool x_rounded, const SublayerContext& sc, SavedTensors& rec,
                  bool rec_rounded) const override;
  Tensor decode(const Tensor& x, const DecodeLayout& layout, KvCache& cache) const override;
  bool takes_16bit_input() const override { return true; }  // read only by its linear layers
  void add_to_kv_cache(int64_t blocks, int64_t block_size, KvCache& cache) const override;

  // The attention's head width: max(q_head_dim, v_head_dim).
  int64_t head_dim() const { return head_dim_; }

 private:
  // RoPE (with YaRN's mscale) on x [rows, heads, qk_pos_emb_head_dim], or its gradient.
  void rotate(const Tensor& x, const Tensor& positions, bool backward) const;

  const ModelConfig& config_;
  int64_t layer_number_;
  const parallel::TensorParallelContext& tp_;
  int64_t heads_;     // on this rank
  int64_t head_dim_;  // of the attention: max(q_head_dim, v_head_dim)
  // Query: linear_q_proj, or linear_q_down_proj (replicated) + q_layernorm + linear_q_up_proj.
  std::unique_ptr<ColumnParallelLinear> q_proj_, q_down_, q_up_;
  std::unique_ptr<ColumnParallelLinear> kv_down_;  // replicated
  std::unique_ptr<ColumnParallelLinear> kv_up_;
  RowParallelLinear proj_;
  std::unique_ptr<Norm> q_norm_, kv_norm_;  // --qk-layernorm: the latents' norms (null without it)
  kernels::math::RopeScaling rope_scaling_;
  float rope_mscale_, softmax_scale_;
};

}  // namespace tessera::model
