// BERT's heads on the last pipeline chunk (Megatron's BertModel with post_process): the encoder's final
// norm, then
//  - the masked-LM head (BertLMHead): dense h -> h, GELU, LayerNorm, logits against the word embedding
//    it is tied to plus a vocab-parallel bias, and VocabParallelCrossEntropy over the masked positions;
//  - with the binary head, the pooler (tanh of a dense layer on the [CLS] position, s = 0) and the
//    sentence-order classifier Linear(h, 2) with its cross-entropy, a mean over samples.
// The dense layers of the heads are replicated over the tensor group (torch Linear in Megatron): the LM
// head's run on this rank's rows (sequence shards under sequence parallelism, so their gradients are
// partial sums), the pooler's on the [CLS] rows gathered from the first sequence shard.
#pragma once

#include <memory>

#include "model/lm_head.h"

namespace tessera::model {

struct BertHeadRecord {
  Tensor labels, loss_mask;  // [seq, batch] layout
  Tensor sentence_order;     // int32 [batch]
  Tensor final_input, final_ln, final_mean, final_rstd;
  Tensor dense, gelu, transform, transform_mean, transform_rstd;  // the LM head's transform, this rank's rows
  Tensor logits, lse;                                            // this rank's vocabulary shard
  Tensor cls, pooled, binary_logits, binary_lse, binary_mask;    // the binary head ([batch, ...])
  int64_t head_bytes() const;
};

class BertHeads {
 public:
  // tied_word_embeddings: the chunk's own word embedding, or null on a last stage without the embedding
  // (the heads then declare the tied copy, as GPT's LMHead).
  BertHeads(const ModelConfig& config, ParameterSet& params, const parallel::TensorParallelContext& tp,
            Parameter* tied_word_embeddings);

  // x [T (/tp under sequence parallelism), hidden]; rec.labels, loss_mask and sentence_order set by the
  // caller. Adds the masked-LM loss sum to losses.lm and, with the binary head, "sop loss" (the summed
  // sentence-order loss times ctx.per_sample_loss_weight).
  void forward(const Tensor& x, const ForwardContext& ctx, BertHeadRecord& rec, LossSums& losses) const;
  // Returns the gradient of x; accumulates the heads' parameter gradients.
  Tensor backward(BertHeadRecord& rec, const ForwardContext& ctx, float grad_scale) const;

  int64_t begin_offset() const { return begin_; }
  int64_t end_offset() const { return end_; }
  // The word embedding the logits are tied to (or its copy).
  Parameter& output_weight() const { return *output_; }

 private:
  struct Linear {
    Parameter* weight;
    Parameter* bias;
  };
  Linear replicated_linear(ParameterSet& params, const std::string& prefix, int64_t out, bool sequence_parallel_grad);
  void linear_forward(const Linear& l, const Tensor& x, const Tensor& y) const;
  void linear_backward(const Linear& l, const Tensor& dy, const Tensor& x, const Tensor& dx) const;

  const ModelConfig& config_;
  const parallel::TensorParallelContext& tp_;
  const ParameterSet* params_;
  int64_t vocab_begin_, vocab_local_;
  int64_t begin_, end_;
  std::unique_ptr<Norm> final_norm_, transform_norm_;
  Linear dense_{}, pooler_{}, binary_{};
  Parameter* output_ = nullptr;       // the word embedding the logits are tied to (or its copy)
  Parameter* output_bias_ = nullptr;  // [padded vocab / tp]
  VocabParallelCrossEntropy lm_loss_;
};

}  // namespace tessera::model
