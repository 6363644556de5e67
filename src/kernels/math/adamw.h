// The AdamW update of one element, shared by the CPU kernel (kernels/cpu/adamw.cc: its scalar tail, and the
// formula its AVX loop spells out in 8 lanes) and a GPU's (one element per thread), and the step's scalars
// that both compute once on the host.
#pragma once

#include <math.h>  // sqrtf, which device code has too

#include <cmath>

#include "core/check.h"
#include "core/host_device.h"
#include "kernels/adamw.h"

namespace tessera::kernels::math {

// Per-step scalars, folded once in double on the host (as torch does with Python floats).
struct AdamWCoeffs {
  float decay;         // 1 - lr * wd
  float step_size;     // lr / (1 - b1^t)
  float inv_bc2_sqrt;  // 1 / sqrt(1 - b2^t)
  float b1, one_minus_b1, b2, one_minus_b2, eps;
  float grad_scale;    // the clipping (and unscaling) factor, applied as the gradient is read
};

// The step's scalars from its hyperparameters, on the host: what the CPU and the CUDA kernels both use.
inline AdamWCoeffs adamw_coeffs(const AdamWHyper& h) {
  TESSERA_CHECK(h.step >= 1, "adamw_step: step counts from 1, got ", h.step);
  double t = static_cast<double>(h.step);
  AdamWCoeffs k;
  k.decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay);
  k.step_size = static_cast<float>(h.lr / (1.0 - std::pow(static_cast<double>(h.beta1), t)));
  k.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(static_cast<double>(h.beta2), t)));
  k.b1 = h.beta1;
  k.one_minus_b1 = static_cast<float>(1.0 - h.beta1);
  k.b2 = h.beta2;
  k.one_minus_b2 = static_cast<float>(1.0 - h.beta2);
  k.eps = h.eps;
  k.grad_scale = h.grad_scale;
  return k;
}

// The factor that clips gradients of global norm `grad_norm` to `clip_grad` (1 when they are within it
// or clipping is off), as Megatron's clip_grad_norm_: optim/optimizer.h's clip_factor, spelled out here
// for the one-launch gradient norm on a GPU and its CPU counterpart (the same double arithmetic).
TESSERA_HOST_DEVICE inline float clip_coefficient(float clip_grad, double grad_norm) {
  if (clip_grad <= 0) return 1.0f;
  const double coeff = clip_grad / (grad_norm + 1e-6);
  return coeff < 1.0 ? static_cast<float>(coeff) : 1.0f;
}

// The step's scalars after the sum of squares: grad_norm of the unscaled gradients, and the factor each
// gradient is multiplied by (clipping and unscaling), NaN where the norm is not finite (no step).
TESSERA_HOST_DEVICE inline void step_scalars_of(double sum_of_squares, float clip_grad, float loss_scale,
                                                double* grad_norm, float* clip_scale) {
  *grad_norm = sqrt(sum_of_squares) / loss_scale;
  *clip_scale = isfinite(*grad_norm) ? clip_coefficient(clip_grad, *grad_norm) / loss_scale : NAN;
}

// torch.optim.AdamW (single-tensor path): p *= 1 - lr wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= step_size * m / (sqrt(v) / sqrt(1 - b2^t) + eps). g is the gradient already times grad_scale.
TESSERA_HOST_DEVICE inline void adamw_update_one(float& p, float g, float& m, float& v, const AdamWCoeffs& k) {
  // Each product rounded on its own, as the CPU's AVX loop computes it, so the GPU's bits are the CPU's
  // (sqrtf and the division are correctly rounded on both).
  m = add_rn(mul_rn(k.b1, m), mul_rn(k.one_minus_b1, g));
  v = add_rn(mul_rn(k.b2, v), mul_rn(mul_rn(k.one_minus_b2, g), g));
  p = sub_rn(mul_rn(p, k.decay), mul_rn(k.step_size, m) / add_rn(mul_rn(sqrtf(v), k.inv_bc2_sqrt), k.eps));
}

}  // namespace tessera::kernels::math
