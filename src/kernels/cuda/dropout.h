// The CUDA implementation of kernels/dropout.h over device pointers (kernels/cuda/pointwise.cu): the
// mask drawn from the same Philox elements with the same keep test (kernels/math/dropout.h,
// core/philox.h), so it is the CPU's bit for bit. Declared in every build, defined only in a CUDA one.
#pragma once

#include <cstdint>

#include "kernels/dropout.h"

namespace tessera::kernels::cuda {

void dropout_forward(const float* x, float* y, float p, uint64_t seed, uint64_t stream, const DropoutRegion& r);
void dropout_backward(const float* dy, float* dx, float p, uint64_t seed, uint64_t stream, const DropoutRegion& r);

}  // namespace tessera::kernels::cuda
