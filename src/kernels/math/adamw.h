// The AdamW update of one element, shared by the CPU kernel (kernels/adamw.cc: its scalar tail, and the
// formula its AVX loop spells out in 8 lanes) and a GPU's (one element per thread).
#pragma once

#include <math.h>  // sqrtf, which device code has too

#include "core/host_device.h"

namespace tessera::kernels::math {

// Per-step scalars, folded once in double on the host (as torch does with Python floats).
struct AdamWCoeffs {
  float decay;         // 1 - lr * wd
  float step_size;     // lr / (1 - b1^t)
  float inv_bc2_sqrt;  // 1 / sqrt(1 - b2^t)
  float b1, one_minus_b1, b2, one_minus_b2, eps;
  float grad_scale;    // the clipping (and unscaling) factor, applied as the gradient is read
};

// torch.optim.AdamW (single-tensor path): p *= 1 - lr wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= step_size * m / (sqrt(v) / sqrt(1 - b2^t) + eps). g is the gradient already times grad_scale.
TESSERA_HOST_DEVICE inline void adamw_update_one(float& p, float g, float& m, float& v, const AdamWCoeffs& k) {
  m = k.b1 * m + k.one_minus_b1 * g;
  v = k.b2 * v + k.one_minus_b2 * g * g;
  p = p * k.decay - k.step_size * m / (sqrtf(v) * k.inv_bc2_sqrt + k.eps);
}

}  // namespace tessera::kernels::math
