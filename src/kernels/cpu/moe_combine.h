// The CPU implementation of kernels/moe_combine.h over host buffers.
#pragma once

#include <cstdint>

namespace tessera::kernels::cpu {

void scale_rows(float* rows, const float* weight, int64_t n, int64_t h);
void scatter_slot_values(const float* values, const int32_t* slot, int64_t n, float* out, int64_t out_n);
void two_way_mix_forward(const float* a, const float* b, const float* logits, float* y, int64_t rows, int64_t h);
void two_way_mix_backward(const float* a, const float* b, const float* logits, const float* dy, float* da,
                          float* db, float* dlogits, int64_t rows, int64_t h);

}  // namespace tessera::kernels::cpu
