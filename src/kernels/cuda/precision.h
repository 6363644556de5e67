// The CUDA implementation of kernels/precision.h's conversions over device pointers
// (kernels/cuda/pointwise.cu), with the CPU's rounding bit for bit (round-to-nearest-even, the bf16
// encoding shared through core/dtype.h). Declared in every build, defined only in a CUDA one.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels::cuda {

// out[i] = round_to(t, in[i]) for t F32, BF16 or F16; in may equal out.
void round_to(DType t, const float* in, float* out, int64_t n);
// The 16-bit encodings of in[0..n) (t BF16 or F16), and back to fp32.
void encode_16bit(DType t, const float* in, uint16_t* out, int64_t n);
void widen_16bit(DType t, const uint16_t* in, float* out, int64_t n);

}  // namespace tessera::kernels::cuda
