// Evaluation's scoring of one row over vocab-parallel shards (kernels/vocab_parallel_loss.h's
// pick_scores), shared by the CPU loop and a GPU's thread per row.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace tessera::kernels::math {

// best: per shard, per row, (its largest logit, that logit's global id); out[3r..3r+2] = (target,
// lse, the id of the largest logit over the shards, the first shard winning ties).
TESSERA_HOST_DEVICE inline void pick_score_row(const float* best, int64_t shards, const float* target, const float* lse,
                                               float* out, int64_t rows, int64_t r) {
  int64_t winner = 0;
  for (int64_t s = 1; s < shards; ++s)
    if (best[s * 2 * rows + 2 * r] > best[winner * 2 * rows + 2 * r]) winner = s;
  out[3 * r] = target[r];
  out[3 * r + 1] = lse[r];
  out[3 * r + 2] = best[winner * 2 * rows + 2 * r + 1];
}

}  // namespace tessera::kernels::math
