// The CPU implementation of kernels/distillation_loss.h, over host buffers: what the tensor-level entry
// points call once the tensors' device is checked.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels::cpu {

// student, teacher [rows, vocab_local]; stats [kDistillationStats, rows] (kernels/distillation_loss.h).
void distillation_shard_stats(const float* student, const float* teacher, float temperature, float* stats,
                              int64_t rows, int64_t vocab_local);

// kd_lse [2, rows]; returns sum_r loss_mask[r] KL_r in double.
double distillation_kl_sum(const float* stats, const float* loss_mask, float* kd_lse, int64_t rows);

// In place over logits [rows, vocab_local]: the student's dlogits of dce CE + dkd τ KL.
void distillation_backward(float* logits, const float* teacher, const int32_t* targets, const float* lse,
                           const float* dce, const float* kd_lse, const float* dkd, float temperature, int64_t rows,
                           int64_t vocab_local, int64_t vocab_begin, DType round_output = DType::F32);

}  // namespace tessera::kernels::cpu
