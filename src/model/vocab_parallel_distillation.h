// Knowledge distillation in the LM head (Megatron-DeepSpeed's --kd; DeepSpeed-MoE's Mixture-of-Students):
// the student's per-token loss becomes α·CE + β·τ²·KL(softmax(z_T / τ) ‖ softmax(z_S / τ)) against a
// frozen teacher's logits z_T. No rank holds all logits, so, as the vocab-parallel cross-entropy, each
// rank computes its vocabulary shard's statistics (kernels/distillation_loss.h) and the tensor group
// reduces them; the student's dlogits of both terms are one fused pass.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "parallel/tensor_parallel.h"

namespace tessera::model {

// The KD term's name among the auxiliary losses (model/language_model.h LossSums), as Megatron-DeepSpeed
// logs it: β·τ²·KL summed over loss tokens, so logged per loss token as it enters the objective.
inline constexpr const char* kDistillationLossName = "kd loss";

struct DistillationWeights {
  float alpha = 1.0f;        // of the student's cross-entropy (--kd-alpha-ce)
  float beta = 1.0f;         // of the KD term (--kd-beta-ce)
  float temperature = 1.0f;  // τ (--kd-temp)
};

// What the head distils one micro-batch from (ForwardContext::distillation): the teacher's logits over
// this rank's vocabulary shard, [T, padded vocabulary / tp] in the rows of the student's ([seq, batch]).
struct Distillation {
  DistillationWeights weights;
  Tensor teacher_logits;
};

class VocabParallelDistillation {
 public:
  VocabParallelDistillation(const parallel::TensorParallelContext& tp, int64_t vocab_begin)
      : tp_(tp), vocab_begin_(vocab_begin) {}
  // Returns β·τ²·sum_r loss_mask[r] KL_r and fills kd_lse [2, rows] (the log-sum-exps at τ of the student's
  // and the teacher's logits, for backward). Collective over the tensor group.
  double forward(const Tensor& student, const Tensor& teacher, const Tensor& loss_mask, const DistillationWeights& w,
                 Tensor& kd_lse) const;
  // In place: the student's logits become d(grad_scale sum_r loss_mask[r] (α CE_r + β τ² KL_r))/dlogits,
  // rounded to round_output; lse is the cross-entropy's (VocabParallelCrossEntropy::forward).
  void backward(Tensor& logits, const Tensor& teacher, const Tensor& labels, const Tensor& lse, const Tensor& kd_lse,
                const Tensor& loss_mask, float grad_scale, const DistillationWeights& w, DType round_output) const;

 private:
  const parallel::TensorParallelContext& tp_;
  int64_t vocab_begin_;
};

}  // namespace tessera::model
