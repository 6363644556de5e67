// Knowledge distillation's per-row and per-element arithmetic (kernels/distillation_loss.h), shared by
// the CPU kernels (kernels/cpu/distillation_loss.cc) and the GPU's (kernels/cuda/distillation_loss.cu),
// so that both take a row's KL and each logit's gradient by the same formula; they differ only in the
// order their sums over a row are added (a loop on the CPU, a block's tree on the GPU).
#pragma once

#include <math.h>  // log, which device code has too

#include <cstdint>

#include "core/host_device.h"
#include "kernels/math/softmax.h"

namespace tessera::kernels {

// The rows of the statistics [kDistillationStats, rows] (a column per row of logits), over the scaled
// logits s / τ and t / τ. The maxima come first: the tensor group takes their max, then adds the sums
// once each is rescaled to the group's max (kernels/vocab_parallel_loss.h, rescale_sum_exp).
// Here, not in kernels/distillation_loss.h, so that the CUDA kernels (which include no tensor header)
// index the statistics by the same names.
enum DistillationStat : int64_t {
  kStudentMax,      // max_j s_j / τ
  kTeacherMax,      // max_j t_j / τ
  kStudentSumExp,   // sum_j exp(s_j / τ - student max)
  kTeacherSumExp,   // sum_j exp(t_j / τ - teacher max)
  kCrossSum,        // sum_j exp(t_j / τ - teacher max) (t_j - s_j) / τ (rescaled with the teacher's sum)
  kDistillationStats
};

}  // namespace tessera::kernels

namespace tessera::kernels::math {

// One row's KL(p_T || p_S) from its whole-row statistics at τ (the maxima of s / τ and t / τ, the sums of
// exponentials under them, and the cross sum sum_j exp(t_j / τ - teacher max) (t_j - s_j) / τ):
// cross / teacher sum + lse_S - lse_T, with lse_S - lse_T taken as (max_S - max_T) + log(sum_S / sum_T)
// so that two large log-sum-exps do not cancel.
TESSERA_HOST_DEVICE inline double distillation_row_kl(double s_max, double t_max, double s_sum, double t_sum,
                                                      double cross) {
  return cross / t_sum + (s_max - t_max) + log(s_sum / t_sum);
}

// The KD term's gradient with respect to a student logit x whose teacher logit is t: k (softmax(s / τ)_j -
// softmax(t / τ)_j), inv = 1 / τ, ls and lt the log-sum-exps at τ of the student's and the teacher's row.
// A teacher equal to the student gives exactly 0 (the same arithmetic on both).
TESSERA_HOST_DEVICE inline float distillation_dlogit(float x, float t, float inv, float ls, float lt, float k) {
  return k * (softmax_weight(x * inv, ls) - softmax_weight(t * inv, lt));
}

}  // namespace tessera::kernels::math
