#include "model/vocab_parallel_distillation.h"

#include "kernels/distillation_loss.h"
#include "kernels/elementwise.h"
#include "kernels/vocab_parallel_loss.h"

namespace tessera::model {

double VocabParallelDistillation::forward(const Tensor& student, const Tensor& teacher, const Tensor& loss_mask,
                                          const DistillationWeights& w, Tensor& kd_lse) const {
  const int64_t rows = student.dim(0);
  // On the logits' device (a GPU's: the statistics and the reductions stay there; only the KL sum
  // comes back, as the cross-entropy's does).
  Tensor stats = Tensor::empty({kernels::kDistillationStats, rows}, DType::F32, student.device());
  kernels::distillation_shard_stats(student, teacher, w.temperature, stats);
  if (tp_.size() > 1) {
    // The group's maxima (student's and teacher's), every shard's sums rescaled to them, then added.
    Tensor local_max = stats.narrow(kernels::kStudentMax, 2), global_max = local_max.clone();
    tp_.group->all_reduce(global_max, comm::ReduceOp::Max);
    const Tensor s_max = local_max.narrow(0, 1), t_max = local_max.narrow(1, 1);
    kernels::rescale_sum_exp(stats.narrow(kernels::kStudentSumExp, 1), s_max, global_max.narrow(0, 1));
    kernels::rescale_sum_exp(stats.narrow(kernels::kTeacherSumExp, 1), t_max, global_max.narrow(1, 1));
    kernels::rescale_sum_exp(stats.narrow(kernels::kCrossSum, 1), t_max, global_max.narrow(1, 1));
    local_max.copy_from(global_max);
    tp_.group->all_reduce(stats.narrow(kernels::kStudentSumExp, kernels::kDistillationStats - kernels::kStudentSumExp));
  }
  kd_lse = Tensor::empty({2, rows}, DType::F32, student.device());
  const double tau = w.temperature;
  return w.beta * tau * tau * kernels::distillation_kl_sum(stats, loss_mask, kd_lse);
}

void VocabParallelDistillation::backward(Tensor& logits, const Tensor& teacher, const Tensor& labels,
                                         const Tensor& lse, const Tensor& kd_lse, const Tensor& loss_mask,
                                         float grad_scale, const DistillationWeights& w, DType round_output) const {
  const int64_t rows = logits.dim(0);
  // d(β τ² KL)/ds = β τ (p_S - p_T): the kernel's dkd τ KL with dkd = grad_scale mask β τ.
  Tensor dce = Tensor::empty({rows}, DType::F32, logits.device());
  Tensor dkd = Tensor::empty({rows}, DType::F32, logits.device());
  kernels::scale(loss_mask, grad_scale * w.alpha, dce);
  kernels::scale(loss_mask, grad_scale * w.beta * w.temperature, dkd);
  kernels::distillation_backward(logits, teacher, labels, lse, dce, kd_lse, dkd, w.temperature, vocab_begin_,
                                 round_output);
}

}  // namespace tessera::model
