// Knowledge distillation's loss over a vocabulary shard on tensors, fused like the cross-entropy
// (kernels/cross_entropy.h): per row of student logits s and teacher logits t, KL(softmax(t / τ) ‖
// softmax(s / τ)) from per-shard statistics that the tensor group reduces, and the student's dlogits of
// α·CE + β·τ²·KL written over the logits in one pass, so neither distribution is ever stored. Dispatched
// on the tensors' device (kernels/device_dispatch.h; the CPU code is kernels/cpu/distillation_loss.h, the
// CUDA code kernels/cuda/distillation_loss.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/math/distillation.h"  // DistillationStat, the rows of the statistics

namespace tessera::kernels {

// student, teacher [rows, vocab_local] (the same vocabulary shard); stats [kDistillationStats, rows]
// (kernels/math/distillation.h).
void distillation_shard_stats(const Tensor& student, const Tensor& teacher, float temperature, const Tensor& stats);

// From a whole row's statistics: kd_lse [2, rows] = the log-sum-exps of s / τ (row 0) and t / τ (row 1);
// returns sum_r loss_mask[r] KL_r in double, KL_r = cross_r / teacher sum_r + student lse_r - teacher lse_r
// (= sum_j p_T (log p_T - log p_S)).
double distillation_kl_sum(const Tensor& stats, const Tensor& loss_mask, const Tensor& kd_lse);

// In place, the gradient of sum_r (dce[r] CE_r + dkd[r] τ KL_r) with respect to the student's logits:
//   logits[r, j] <- dce[r] (softmax(s_r)_j - [vocab_begin + j == targets[r]])
//                   + dkd[r] (softmax(s_r / τ)_j - softmax(t_r / τ)_j),
// lse [rows] being the cross-entropy's log-sum-exp of s (at temperature 1) and kd_lse the one above;
// rounded to round_output (mixed precision: dlogits feed only GEMMs). A teacher equal to the student
// adds exactly 0.
void distillation_backward(const Tensor& logits, const Tensor& teacher, const Tensor& targets, const Tensor& lse,
                           const Tensor& dce, const Tensor& kd_lse, const Tensor& dkd, float temperature,
                           int64_t vocab_begin, DType round_output = DType::F32);

}  // namespace tessera::kernels
