// The residual MoE's two-way mix of a token's two outputs (kernels/moe_combine.h: y = c0 a + c1 b with
// (c0, c1) the softmax of the token's two logits) and its gradient, per token, shared by the CPU loops
// (kernels/cpu/moe_combine.cc) and the GPU's threads (kernels/cuda/moe_combine.cu). Both files are compiled
// without FMA contraction; exp is the double one of each side's math library (glibc's and CUDA's may differ
// in the last bit, so the tests compare the mix within a tolerance).
#pragma once

#include <math.h>  // exp(double), which device code has too

#include <cstdint>

#include "core/host_device.h"

namespace tessera::kernels::math {

// The two-way softmax of a token's logits, stable for any magnitude.
TESSERA_HOST_DEVICE inline void softmax2(const float* logits, double& c0, double& c1) {
  const double d = static_cast<double>(logits[1]) - static_cast<double>(logits[0]);
  c0 = 1.0 / (1.0 + exp(d));
  c1 = 1.0 - c0;
}

// One output element: c0 a + c1 b.
TESSERA_HOST_DEVICE inline float two_way_mix(float a, float b, double c0, double c1) {
  return static_cast<float>(c0 * a + c1 * b);
}

// One token's backward over its h columns (every pointer at the token's row; logits and dlogits its two):
// da = c0 dy, db = c1 dy, and the logits' gradient from dL/dc_i = sum_j dy_j x_ij, summed in column order.
TESSERA_HOST_DEVICE inline void two_way_mix_backward_row(const float* a, const float* b, const float* logits,
                                                         const float* dy, float* da, float* db, float* dlogits,
                                                         int64_t h) {
  double c0, c1;
  softmax2(logits, c0, c1);
  double g0 = 0, g1 = 0;  // dL/dc0, dL/dc1
  for (int64_t j = 0; j < h; ++j) {
    const double g = dy[j];
    g0 += g * a[j];
    g1 += g * b[j];
    da[j] = static_cast<float>(c0 * g);
    db[j] = static_cast<float>(c1 * g);
  }
  // Softmax: dz_i = c_i (g_i - sum_j c_j g_j); with two entries dz_0 = c0 c1 (g0 - g1) = -dz_1.
  const double dz0 = c0 * c1 * (g0 - g1);
  dlogits[0] = static_cast<float>(dz0);
  dlogits[1] = static_cast<float>(-dz0);
}

}  // namespace tessera::kernels::math
