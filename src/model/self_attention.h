// Megatron's SelfAttention on one rank: the fused QKV projection (split by query groups, Megatron's
// grouped layout), rotary embeddings, the tiled causal (or document-causal) attention with Philox
// dropout keyed by global head index, and the output projection.
#pragma once

#include "kernels/attention.h"
#include "kernels/math/rotary.h"
#include "model/ring_attention.h"
#include "model/sublayer.h"

namespace tessera::model {

class SelfAttention final : public Sublayer {
 public:
  // causal: GPT's mask (document-causal with ForwardContext::doc_start); otherwise bidirectional over the
  // keys ForwardContext::padding_mask keeps (BERT).
  SelfAttention(const ModelConfig& config, int64_t layer_number, const std::string& prefix, ParameterSet& params,
                const parallel::TensorParallelContext& tp, bool causal = true);

  std::unique_ptr<SavedTensors> make_record() const override;
  Tensor forward(const Tensor& x, bool x_rounded, const SublayerContext& sc, SavedTensors& rec) const override;
  Tensor backward(const Tensor& dy, const Tensor& x, bool x_rounded, const SublayerContext& sc, SavedTensors& rec,
                  bool rec_rounded) const override;
  Tensor decode(const Tensor& x, const DecodeLayout& layout, KvCache& cache) const override;
  bool takes_16bit_input() const override { return true; }  // read only by its linear layers
  void add_to_kv_cache(int64_t blocks, int64_t block_size, KvCache& cache) const override;

 private:
  // Context parallelism (ForwardContext::context_parallel): ring attention over this rank's two chunks.
  RingAttentionShape ring_shape(const ForwardContext& ctx) const;
  // Token slices (ForwardContext::token_slice): attention against the layer's cache of the earlier slices.
  void slice_forward(const ForwardContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn,
                     const Tensor& lse) const;
  // dk, dv: the slice's own keys' and values' gradients (views of the cache's).
  void slice_backward(const ForwardContext& ctx, const Tensor& q, const Tensor& attn, const Tensor& lse,
                      const Tensor& dattn, const Tensor& dq, Tensor& dk, Tensor& dv) const;

  const ModelConfig& config_;
  int64_t layer_number_;
  const parallel::TensorParallelContext& tp_;
  int64_t heads_, groups_;  // on this rank
  bool causal_;
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
  // --qk-layernorm: over each head's query and key (null without it).
  std::unique_ptr<Norm> q_norm_, k_norm_;
  kernels::math::RopeScaling rope_scaling_;
};

}  // namespace tessera::model
