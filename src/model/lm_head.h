// The language-model head on one rank: the final norm, the output layer (tied to the word embedding
// unless --untie-embeddings-and-output-weights) producing this rank's vocabulary shard of the logits,
// and Megatron's VocabParallelCrossEntropy over the shards (with knowledge distillation, also the KD term
// against a teacher's logits, model/vocab_parallel_distillation.h).
#pragma once

#include "model/language_model.h"
#include "model/vocab_parallel_distillation.h"

namespace tessera::model {

struct LMHeadRecord {
  Tensor labels, loss_mask;  // [seq, batch] layout
  Tensor final_input, final_ln, final_mean, final_rstd;
  bool final_ln_rounded = false;  // final_ln holds values of the GEMM input type
  Tensor logits, lse;             // logits [T, padded vocab / tp] of this rank's vocabulary shard
  // The forward fused the loss's gradient (LMHead::forward with a grad_scale): logits already hold
  // d(fused_grad_scale * masked loss sum)/dlogits, which backward uses as they are.
  bool logits_hold_grad = false;
  float fused_grad_scale = 0;
  // Distillation (LMHead::distill): the teacher's logits of the same shard and the log-sum-exps at τ
  // (VocabParallelDistillation); undefined without it.
  Tensor teacher_logits, kd_lse;
  DistillationWeights kd;
  int64_t head_bytes() const;
};

// Cross-entropy when no rank holds all logits: the max, the sum of exponentials and the target logit
// are reduced over the tensor group.
class VocabParallelCrossEntropy {
 public:
  VocabParallelCrossEntropy(const parallel::TensorParallelContext& tp, int64_t vocab_begin, int64_t vocab_local)
      : tp_(tp), vocab_begin_(vocab_begin), vocab_local_(vocab_local) {}
  // Returns sum_t loss_t * loss_mask_t and fills lse [rows]; target [rows] receives the label logits.
  // With a `total` (kernels::loss_total on the logits' device) the sum is added to it instead, nothing is
  // copied back, and 0 is returned.
  double forward(const Tensor& logits, const Tensor& labels, const Tensor& loss_mask, Tensor& lse,
                 Tensor* target = nullptr, const Tensor* total = nullptr) const;
  // In place: logits become d(grad_scale * masked loss sum)/dlogits, rounded to round_output.
  void backward(Tensor& logits, const Tensor& labels, const Tensor& lse, const Tensor& loss_mask, float grad_scale,
                DType round_output) const;
  // Whether forward_backward applies: the whole vocabulary on this rank (no reduction over the tensor
  // group between the statistics and the gradient).
  bool fusable() const { return tp_.size() == 1; }
  // forward and backward as one pass over the logits (kernels::cross_entropy_fused, llm.c's fused
  // classifier): returns forward's sum and fills lse; the logits become backward's gradient.
  double forward_backward(Tensor& logits, const Tensor& labels, const Tensor& loss_mask, Tensor& lse,
                          float grad_scale, DType round_output, const Tensor* total = nullptr) const;
  // Per row (label logit, log-sum-exp, arg-max id over the whole padded vocabulary), as [3 * rows].
  Tensor scores(const Tensor& logits, const Tensor& lse, const Tensor& target) const;

 private:
  const parallel::TensorParallelContext& tp_;
  int64_t vocab_begin_, vocab_local_;
};

class LMHead {
 public:
  // tied_word_embeddings: the chunk's own word embedding when the output layer is tied to it, else null
  // (the head then declares an untied output layer, or the last stage's tied copy).
  LMHead(const ModelConfig& config, ParameterSet& params, const parallel::TensorParallelContext& tp,
         Parameter* tied_word_embeddings);

  // x [T (/tp under sequence parallelism), hidden]; rec.labels and rec.loss_mask set by the caller.
  // Returns the masked loss sum; target, when given, receives the label logits. A training forward whose
  // backward's grad_scale is known (fused_grad_scale > 0) computes the logits' gradient with the loss in
  // one pass where the loss allows it (VocabParallelCrossEntropy::fusable); backward must then be given
  // the same grad_scale. With a `total`, the sum is added to it on the device and 0 returned
  // (VocabParallelCrossEntropy::forward).
  double forward(const Tensor& x, LMHeadRecord& rec, Tensor* target = nullptr, float fused_grad_scale = 0,
                 const Tensor* total = nullptr) const;
  // After forward: the KD term against d's teacher logits (β·τ²·KL summed over loss tokens, returned),
  // kept in rec so that backward's gradient is that of α·CE + β·τ²·KL.
  double distill(LMHeadRecord& rec, const Distillation& d) const;
  // Returns the gradient of x; accumulates the head's parameter gradients. dfinal_extra, when given, is a
  // further gradient of the final norm's output (multi-token prediction's, which starts from it).
  Tensor backward(LMHeadRecord& rec, float grad_scale, const Tensor& dfinal_extra = Tensor()) const;
  // The output layer and the loss alone, on an input already normalised (multi-token prediction's modules
  // end in their own norm and share this output layer): normed [T (/tp), hidden], `rounded` when it holds
  // values of the GEMM input type; rec.labels and rec.loss_mask set by the caller. Returns the masked loss
  // sum; output_loss_backward returns the gradient of `normed`, seeded with grad_scale. With a `total`, the
  // sum is added to it on the device and 0 returned (VocabParallelCrossEntropy::forward).
  double output_loss(const Tensor& normed, bool rounded, LMHeadRecord& rec, const Tensor* total = nullptr) const;
  Tensor output_loss_backward(LMHeadRecord& rec, float grad_scale) const;
  // A distillation teacher's forward: this rank's vocabulary shard of the logits [T, padded vocab / tp]
  // of x [T (/tp under sequence parallelism), hidden], no loss.
  Tensor logits(const Tensor& x) const;
  // Scoring: forward without a loss, returning VocabParallelCrossEntropy::scores.
  Tensor score(const Tensor& x, const Tensor& labels) const;
  // Inference: the logits over the padded vocabulary of the given rows of x [n, hidden], [rows, padded vocab].
  Tensor decode(const Tensor& x, const std::vector<int64_t>& rows) const;

  int64_t begin_offset() const { return begin_; }
  int64_t end_offset() const { return end_; }
  // The output layer's weight: its own, or the word embedding it is tied to (or that embedding's copy).
  Parameter& output_weight() const { return *output_; }

 private:
  Tensor logits_of(const Tensor& final_ln_full, bool rounded) const;

  const ModelConfig& config_;
  const parallel::TensorParallelContext& tp_;
  const ParameterSet* params_;
  int64_t vocab_begin_, vocab_local_;
  int64_t begin_, end_;
  std::unique_ptr<Norm> final_norm_;
  Parameter* output_ = nullptr;  // the output layer's weight, or the word embedding it is tied to
  VocabParallelCrossEntropy loss_;
  VocabParallelDistillation distillation_;
};

}  // namespace tessera::model
