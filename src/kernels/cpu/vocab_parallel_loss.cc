#include "kernels/cpu/vocab_parallel_loss.h"

#include <cmath>

#include "kernels/math/vocab_scores.h"

namespace tessera::kernels::cpu {

void rescale_sum_exp(float* sumexp, const float* max, const float* global_max, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) sumexp[r] *= std::exp(max[r] - global_max[r]);
}

double masked_loss_sum(const float* max, const float* sumexp, const float* target, const float* loss_mask,
                       float* lse, int64_t rows) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    lse[r] = max[r] + std::log(sumexp[r]);
    total += static_cast<double>(lse[r] - target[r]) * loss_mask[r];
  }
  return total;
}

void shard_argmax(const float* logits_all, float* best, int64_t rows, int64_t vocab_local, int64_t vocab_begin) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* logits = logits_all + r * vocab_local;
    int64_t arg = 0;
    for (int64_t v = 1; v < vocab_local; ++v)
      if (logits[v] > logits[arg]) arg = v;
    best[2 * r] = logits[arg];
    best[2 * r + 1] = static_cast<float>(vocab_begin + arg);
  }
}

void pick_scores(const float* best, int64_t shards, const float* target, const float* lse, float* out,
                 int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) math::pick_score_row(best, shards, target, lse, out, rows, r);
}

}  // namespace tessera::kernels::cpu
