// GELU (tanh form) and SwiGLU, fp32.
//
// Both are written in terms of the logistic sigmoid, using 0.5 (1 + tanh(u)) = sigmoid(2u), and the
// sigmoid in terms of an exp that the compiler can vectorise (libm's expf/tanhf are scalar calls
// unless the build uses -ffast-math, which we don't).
#include "kernels/activations.h"
#include "kernels/vector_math.h"

#include <algorithm>
#include <bit>
#include <cstdint>

#include "core/profiler.h"
#include "kernels/precision.h"

namespace tessera::kernels {
namespace {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluC = 0.044715f;

}  // namespace

// gelu(x) = x * s with s = sigmoid(2u), u = k (x + c x^3).
void gelu_forward(const float* x, float* y, int64_t n, DType round_output) {
  TESSERA_PROFILE_SCOPE("gelu_forward");
  if (round_output == DType::F32) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      float xi = x[i];
      float u = kGeluK * (xi + kGeluC * xi * xi * xi);
      y[i] = xi / (1.0f + exp_approx(-2.0f * u));
    }
    return;
  }
  // In pieces, each rounded while it is in cache (the same values as above, then rounded: the mixed
  // precision tests compare the two bitwise).
  constexpr int64_t kPiece = 4096;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; b += kPiece) {
    const int64_t e = std::min(n, b + kPiece);
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      float xi = x[i];
      float u = kGeluK * (xi + kGeluC * xi * xi * xi);
      y[i] = xi / (1.0f + exp_approx(-2.0f * u));
    }
    if (round_output != DType::F32) round_to_serial(round_output, y + b, y + b, e - b);
  }
}

// gelu'(x) = s + 2 x s (1 - s) k (1 + 3 c x^2). 1 - s is computed as e * s (e = exp(-2u)) rather than
// by subtraction, which would lose all its digits where s is close to 1.
// `omp simd` also tells the compiler the loop is safe when dx == dy (each lane reads before it writes).
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  TESSERA_PROFILE_SCOPE("gelu_backward");
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float xi = x[i];
    float u = kGeluK * (xi + kGeluC * xi * xi * xi);
    float e = exp_approx(-2.0f * u);
    float s = 1.0f / (1.0f + e);
    float du = kGeluK * (1.0f + 3.0f * kGeluC * xi * xi);
    dx[i] = dy[i] * (s + 2.0f * xi * s * (e * s) * du);
  }
}

// y = silu(g) * up = g * sigmoid(g) * up.
void swiglu_forward(const float* x, float* y, int64_t rows, int64_t width, DType round_output) {
  TESSERA_PROFILE_SCOPE("swiglu_forward");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = x + r * 2 * width;
    const float* up = gate + width;
    float* yr = y + r * width;
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) {
      float g = gate[c];
      yr[c] = g / (1.0f + exp_approx(-g)) * up[c];
    }
    if (round_output != DType::F32) round_to_serial(round_output, yr, yr, width);
  }
}

// d gate = dy * up * sigmoid(g) (1 + g (1 - sigmoid(g))),  d up = dy * silu(g).
void swiglu_backward(const float* x, const float* dy, float* dx, int64_t rows, int64_t width) {
  TESSERA_PROFILE_SCOPE("swiglu_backward");
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = x + r * 2 * width;
    const float* up = gate + width;
    const float* dyr = dy + r * width;
    float* dgate = dx + r * 2 * width;
    float* dup = dgate + width;
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) {
      float g = gate[c];
      float e = exp_approx(-g);
      float s = 1.0f / (1.0f + e);
      dgate[c] = dyr[c] * up[c] * s * (1.0f + g * (e * s));
      dup[c] = dyr[c] * g * s;
    }
  }
}

}  // namespace tessera::kernels
