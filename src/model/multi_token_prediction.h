// Multi-token prediction (DeepSeek-V3's MTP, Megatron-Core's MultiTokenPredictionBlock with
// --mtp-num-layers N): N modules after the main model on the chunk with the LM head. Module k (1-based)
// predicts the token k + 1 ahead of each position:
//   e   = enorm(embedding(tokens rolled left k times))      (the shared word embedding)
//   h'  = hnorm(h_{k-1})                                     (h_0: the main model's final-norm output)
//   x   = eh_proj([e, h'])                                   (2h -> h, no bias; embedding first, as Megatron)
//   h_k = final_layernorm(transformer_layer(x))              (one layer as the model's)
//   loss_k = cross-entropy of the shared output layer on h_k against the labels rolled left k times, masked
//            by the loss mask rolled alike.
// Rolling is Megatron's roll_tensor: each sample's sequence shifted left by one, the last position filled
// with 0 (a masked-out position of the rolled mask). RoPE keeps the unrolled positions (Megatron passes the
// main model's rotary embedding); learned absolute positions are looked up at the rolled position ids.
//
// The objective gains mtp_loss_scaling_factor / N x sum_k loss_k x (loss tokens / rolled loss tokens), the
// ratio per micro-batch as Megatron's calculate_per_token_loss applies it, so that after the trainer's
// division by the global batch's loss tokens each module's loss counts as the mean over its own tokens.
// Each loss_k x ratio is also added to LossSums under "mtp_<k> loss" (logged apart, without the factor,
// as Megatron's MTPLossLoggingHelper); the LM loss is the main head's alone.
//
// Parameters as Megatron-Core names them: mtp.layers.<k-1>.{enorm,hnorm,final_layernorm}.weight,
// mtp.layers.<k-1>.eh_proj.weight (column-parallel [h, 2h]) and mtp.layers.<k-1>.transformer_layer.*.
// The module's layer keys its dropout as layer num_layers + k.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/lm_head.h"
#include "model/transformer_layer.h"

namespace tessera::model {

// One module's tensors of one micro-batch, kept from forward for backward.
struct MtpDepthRecord {
  Tensor tokens, embedding_positions;  // rolled [T]
  Tensor embedding, e, e_mean, e_rstd;  // the embedding (enorm's input) and enorm's output
  Tensor h_in, h, h_mean, h_rstd;       // hnorm's input (the previous depth's output) and output
  Tensor cat;                           // [e, h] [T (/tp), 2h]
  LayerRecord layer;
  Tensor final_input, final_mean, final_rstd;
  LMHeadRecord head;  // labels and mask rolled, h_k as final_ln, the logits and log-sum-exps
  double weight = 0;  // loss tokens / rolled loss tokens (0 where no rolled token is left)
};

struct MtpRecord {
  std::vector<MtpDepthRecord> depths;
  int64_t bytes() const;
};

// Names of the losses forward adds: "mtp_1 loss" ... "mtp_N loss".
std::vector<std::string> mtp_loss_names(const ModelConfig& c);

class MultiTokenPrediction {
 public:
  // Declares the modules' parameters in `params`. words: the word embedding the modules look tokens up in
  // (the chunk's own, or on a last pipeline stage without it the output layer's tied copy or, untied, a
  // copy of its own); positions: the learned absolute position embedding (the chunk's own or the last
  // stage's copy), or null under RoPE. head: the shared output layer and loss.
  MultiTokenPrediction(const ModelConfig& config, ParameterSet& params, const parallel::TensorParallelContext& tp,
                       const TransformerLayerSpec& layer_spec, Parameter& words, Parameter* positions,
                       const LMHead& head);

  // h0: the main head's final-norm output (rec.final_ln of the LM head; hnorm reads it in fp32 whatever
  // it holds); tokens, labels, loss_mask, positions: the micro-batch's, in the [seq, batch] layout. Adds each
  // module's loss to `losses`. host_loss_mask (MicroBatch::host_loss_mask), where given and the sums stay on
  // the device (LossSums::keeps_on), keeps the modules' losses there too: the loss weights' token counts are
  // taken from it on the host and each module's masked loss sum goes to a slot of `losses`.
  void forward(const Tensor& h0, const Tensor& tokens, const Tensor& labels, const Tensor& loss_mask,
               const Tensor& positions, const ForwardContext& ctx, MtpRecord& rec, LossSums& losses,
               const Tensor& host_loss_mask = Tensor()) const;
  // Accumulates the modules' gradients (and the shared embedding's and output layer's); returns the
  // gradient of h0. Consumes rec.
  Tensor backward(MtpRecord& rec, const Tensor& positions, const ForwardContext& ctx, float grad_scale) const;

  int64_t begin_offset() const { return begin_; }
  int64_t end_offset() const { return end_; }

 private:
  struct Module {
    std::unique_ptr<Norm> enorm, hnorm, final_norm;
    std::unique_ptr<ColumnParallelLinear> eh_proj;
    std::unique_ptr<TransformerLayer> layer;
  };
  Tensor embed(const Tensor& tokens, const Tensor& positions, int64_t depth, const ForwardContext& ctx) const;
  void embed_backward(const Tensor& dy, const Tensor& tokens, const Tensor& positions, int64_t depth,
                      const ForwardContext& ctx) const;

  const ModelConfig& config_;
  const parallel::TensorParallelContext& tp_;
  Parameter& words_;
  Parameter* positions_;
  const LMHead& head_;
  int64_t vocab_begin_, vocab_end_;
  std::vector<Module> modules_;
  int64_t begin_, end_;
};

}  // namespace tessera::model
