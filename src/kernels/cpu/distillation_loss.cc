// Fused distillation loss, fp32 logits, float64 sums.
//
// The statistics are two passes over each row (the maxima, then the sums), as the cross-entropy's: the
// sums are taken under the maxima, so no exponent is positive however large the logits, and they are
// accumulated in double. The cross term sum_j p_T (t - s) is kept unnormalised beside the teacher's sum
// so that vocabulary shards combine as sums. The student and the teacher go through the same arithmetic
// in the same order, so a teacher equal to the student gives a KL of exactly 0 and adds exactly 0 to the
// gradient. Backward is one elementwise pass cut into (row, column chunk) tasks. A row's KL and each
// logit's KD gradient are kernels/math/distillation.h's, which the GPU kernels run too.
#include "kernels/cpu/distillation_loss.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/profiler.h"
#include "kernels/distillation_loss.h"
#include "kernels/math/distillation.h"
#include "kernels/math/softmax.h"
#include "kernels/precision.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {
namespace {

constexpr int64_t kColumnsPerTask = 4096;  // backward columns per task (16 KB)

}  // namespace

void distillation_shard_stats(const float* student, const float* teacher, float temperature, float* stats,
                              int64_t rows, int64_t vocab_local) {
  TESSERA_PROFILE_SCOPE("distillation_shard_stats");
  TESSERA_CHECK(vocab_local > 0, "distillation_shard_stats: empty vocabulary shard");
  TESSERA_CHECK(temperature > 0, "distillation_shard_stats: temperature ", temperature, " is not positive");
  const float inv = 1.0f / temperature;
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(4 * rows * vocab_local))
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = student + r * vocab_local;
    const float* t = teacher + r * vocab_local;
    float s_max = -INFINITY, t_max = -INFINITY;
    for (int64_t j = 0; j < vocab_local; ++j) {
      s_max = std::max(s_max, s[j] * inv);
      t_max = std::max(t_max, t[j] * inv);
    }
    double s_sum = 0, t_sum = 0, cross = 0;
    for (int64_t j = 0; j < vocab_local; ++j) {
      const float sj = s[j] * inv, tj = t[j] * inv;
      const double w = math::softmax_weight(tj, t_max);
      s_sum += math::softmax_weight(sj, s_max);
      t_sum += w;
      cross += w * (static_cast<double>(tj) - static_cast<double>(sj));
    }
    stats[kStudentMax * rows + r] = s_max;
    stats[kTeacherMax * rows + r] = t_max;
    stats[kStudentSumExp * rows + r] = static_cast<float>(s_sum);
    stats[kTeacherSumExp * rows + r] = static_cast<float>(t_sum);
    stats[kCrossSum * rows + r] = static_cast<float>(cross);
  }
}

double distillation_kl_sum(const float* stats, const float* loss_mask, float* kd_lse, int64_t rows) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double s_max = stats[kStudentMax * rows + r], t_max = stats[kTeacherMax * rows + r];
    const double s_sum = stats[kStudentSumExp * rows + r], t_sum = stats[kTeacherSumExp * rows + r];
    kd_lse[r] = static_cast<float>(s_max + std::log(s_sum));
    kd_lse[rows + r] = static_cast<float>(t_max + std::log(t_sum));
    const double kl = math::distillation_row_kl(s_max, t_max, s_sum, t_sum, stats[kCrossSum * rows + r]);
    total += kl * loss_mask[r];
  }
  return total;
}

void distillation_backward(float* logits, const float* teacher, const int32_t* targets, const float* lse,
                           const float* dce, const float* kd_lse, const float* dkd, float temperature, int64_t rows,
                           int64_t vocab_local, int64_t vocab_begin, DType round_output) {
  TESSERA_PROFILE_SCOPE("distillation_backward");
  TESSERA_CHECK(temperature > 0, "distillation_backward: temperature ", temperature, " is not positive");
  const float inv = 1.0f / temperature;
  const int64_t chunks = (vocab_local + kColumnsPerTask - 1) / kColumnsPerTask;
#pragma omp parallel for collapse(2) schedule(static) if (parallel : parallel_worth(4 * rows * vocab_local))
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t j0 = c * kColumnsPerTask, n = std::min(kColumnsPerTask, vocab_local - j0);
      float* x = logits + r * vocab_local + j0;
      const float* t = teacher + r * vocab_local + j0;
      const float l = lse[r], d = dce[r], ls = kd_lse[r], lt = kd_lse[rows + r], k = dkd[r];
      // As the cross-entropy's backward: the target's logit is kept so that (p - 1) d is formed whole.
      const int64_t target = static_cast<int64_t>(targets[r]) - vocab_begin - j0;
      const bool has_target = target >= 0 && target < n;
      const float xt = has_target ? x[target] : 0.0f;
      auto kd = [&](float xj, float tj) { return math::distillation_dlogit(xj, tj, inv, ls, lt, k); };
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) x[j] = math::cross_entropy_dlogit(x[j], l, d) + kd(x[j], t[j]);
      if (has_target) x[target] = math::cross_entropy_dlogit_target(xt, l, d) + kd(xt, t[target]);
      if (round_output != DType::F32) round_to_serial(round_output, x, x, n);
    }
  }
}

}  // namespace tessera::kernels::cpu
