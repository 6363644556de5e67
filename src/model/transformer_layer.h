// One transformer layer (Megatron-Core's TransformerLayer on one rank), with an attention slot and a
// feed-forward slot filled from a TransformerLayerSpec. Pre-LN:
//   h = x + dropout(self_attention(norm1(x)))
//   y = h + dropout(mlp(norm2(h)))
// With --apply-residual-connection-post-layernorm (the original BERT ordering) each residual is the
// norm's output: z = norm1(x), h = z + dropout(self_attention(z)), u = norm2(h), y = u + dropout(mlp(u)).
// Activations are [seq, batch, hidden] (Megatron's [s, b, h]); row t of a 2-D view is (s, b) = (t / B, t % B).
#pragma once

#include <memory>

#include "model/sublayer.h"

namespace tessera::model {

// What the backward of one layer needs from its forward, for one micro-batch.
struct LayerRecord final : SavedTensors {
  Tensor input;
  Tensor ln1, ln1_mean, ln1_rstd;
  Tensor residual;  // h
  Tensor ln2, ln2_mean, ln2_rstd;
  std::unique_ptr<SavedTensors> attention, mlp;  // the slots' records
  // Set by forward: ln1 / ln2 is read in backward only by its slot's linear layers (pre-LN, a slot that
  // takes_16bit_input), so a GPU keeps it in 16 bits for backward (visit_gemm_inputs).
  bool ln1_gemm_input = false, ln2_gemm_input = false;
  void visit(const std::function<void(Tensor&, bool)>& f) override;
  void visit_gemm_inputs(const std::function<void(Tensor&)>& f) override;
};

class TransformerLayer {
 public:
  // layer_number is 1-based and global (across pipeline stages), as in Megatron. With tp.sequence_parallel
  // the residual stream is [seq/tp, batch, hidden] per rank.
  TransformerLayer(const ModelConfig& config, int64_t layer_number, ParameterSet& params,
                   const parallel::TensorParallelContext& tp, const TransformerLayerSpec& spec);
  // The same under the parameter name prefix `prefix` ("mtp.layers.0.transformer_layer." for a
  // multi-token prediction module's layer); layer_number keys its dropout masks.
  TransformerLayer(const ModelConfig& config, int64_t layer_number, const std::string& prefix, ParameterSet& params,
                   const parallel::TensorParallelContext& tp, const TransformerLayerSpec& spec);

  // x [T (/tp when sequence parallel), hidden] -> y shaped like x; positions [T] for rotary embeddings.
  Tensor forward(const Tensor& x, const Tensor& positions, const ForwardContext& ctx, LayerRecord& rec) const;
  // dy [T, hidden] -> dx [T, hidden]; accumulates parameter gradients. Consumes rec.
  Tensor backward(const Tensor& dy, const Tensor& positions, const ForwardContext& ctx, LayerRecord& rec) const;

  // Inference on a decoding step's rows (x [rows, hidden], no dropout, no record): stores their keys and
  // values in the pool at their sequences' positions and attends over each sequence's cache.
  // Needs a model built without sequence parallelism.
  Tensor decode(const Tensor& x, const DecodeLayout& layout, KvCache& cache) const;
  KvCache make_kv_cache(int64_t blocks, int64_t block_size) const;

 private:
  enum DropoutSite { kAttentionOutput = 2, kMlpOutput = 3 };  // 1: attention probabilities
  void hidden_dropout(const Tensor& x, const ForwardContext& ctx, int site, bool backward) const;

  const ModelConfig& config_;
  int64_t layer_number_;
  const parallel::TensorParallelContext& tp_;
  Norm input_norm_, pre_mlp_norm_;
  std::unique_ptr<Sublayer> self_attention_, mlp_;
};

// Megatron's GPT layer: causal SelfAttention and the dense Mlp, or an MoeLayer where the config's
// moe gives the layer experts (model/moe_layer.h make_feed_forward).
TransformerLayerSpec gpt_layer_spec();
// Megatron's BERT layer: bidirectional SelfAttention with the padding mask, the feed-forward slot as
// GPT's, under "encoder".
TransformerLayerSpec bert_layer_spec();

}  // namespace tessera::model
