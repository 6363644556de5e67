// The CUDA implementation of kernels/moe_combine.h over device pointers (kernels/cuda/moe_combine.cu):
// one thread per element or row with the CPU loops' arithmetic (kernels/cpu/moe_combine.cc), so
// scale_rows and scatter_slot_values are the CPU's bit for bit; the residual mix's two-way softmax uses
// the device's double exp, which may differ from glibc's in the last bit. Declared in every build,
// defined only in a CUDA one.
#pragma once

#include <cstdint>

namespace tessera::kernels::cuda {

void scale_rows(float* rows, const float* weight, int64_t n, int64_t h);
// out[slot[r]] += values[r] where slot[r] >= 0; the slots are distinct routing entries.
void scatter_slot_values(const float* values, const int32_t* slot, int64_t n, float* out);
void two_way_mix_forward(const float* a, const float* b, const float* logits, float* y, int64_t rows, int64_t h);
void two_way_mix_backward(const float* a, const float* b, const float* logits, const float* dy, float* da, float* db,
                          float* dlogits, int64_t rows, int64_t h);

}  // namespace tessera::kernels::cuda
