// GELU (tanh form) and SwiGLU of one element, shared by the CPU kernels (kernels/activations.cc, inside
// their `omp simd` loops) and a GPU's (one element per thread). Written with the logistic sigmoid,
// 0.5 (1 + tanh(u)) = sigmoid(2u), and the sigmoid with exp_approx, which vectorises where libm's
// expf/tanhf would be scalar calls.
#pragma once

#include "core/host_device.h"
#include "kernels/vector_math.h"

namespace tessera::kernels::math {

inline constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluC = 0.044715f;

// gelu(x) = x * s with s = sigmoid(2u), u = k (x + c x^3).
TESSERA_HOST_DEVICE inline float gelu_tanh(float x) {
  float u = kGeluK * (x + kGeluC * x * x * x);
  return x / (1.0f + exp_approx(-2.0f * u));
}

// dy * gelu'(x), gelu'(x) = s + 2 x s (1 - s) k (1 + 3 c x^2). 1 - s is computed as e * s
// (e = exp(-2u)) rather than by subtraction, which would lose all its digits where s is close to 1.
TESSERA_HOST_DEVICE inline float gelu_tanh_backward(float x, float dy) {
  float u = kGeluK * (x + kGeluC * x * x * x);
  float e = exp_approx(-2.0f * u);
  float s = 1.0f / (1.0f + e);
  float du = kGeluK * (1.0f + 3.0f * kGeluC * x * x);
  return dy * (s + 2.0f * x * s * (e * s) * du);
}

// silu(gate) * up = gate * sigmoid(gate) * up.
TESSERA_HOST_DEVICE inline float swiglu(float gate, float up) { return gate / (1.0f + exp_approx(-gate)) * up; }

// d gate = dy * up * sigmoid(g) (1 + g (1 - sigmoid(g))),  d up = dy * silu(g); 1 - sigmoid(g) as e * s.
TESSERA_HOST_DEVICE inline void swiglu_backward(float gate, float up, float dy, float& dgate, float& dup) {
  float e = exp_approx(-gate);
  float s = 1.0f / (1.0f + e);
  dgate = dy * up * s * (1.0f + gate * (e * s));
  dup = dy * gate * s;
}

}  // namespace tessera::kernels::math
