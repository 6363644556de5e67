// GELU (tanh form) and SwiGLU, fp32: the per-element math is kernels/math/activations.h (shared with a
// GPU kernel), these are its OpenMP loops.
#include "kernels/cpu/activations.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/profiler.h"
#include "kernels/math/activations.h"
#include "kernels/precision.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {

void gelu_forward(const float* x, float* y, int64_t n, DType round_output) {
  TESSERA_PROFILE_SCOPE("gelu_forward");
  if (round_output == DType::F32) {
#pragma omp parallel for simd schedule(static) if (parallel : parallel_worth(4 * n))
    for (int64_t i = 0; i < n; ++i) {
      y[i] = math::gelu_tanh(x[i]);
    }
    return;
  }
  // In pieces, each rounded while it is in cache (the same values as above, then rounded: the mixed
  // precision tests compare the two bitwise).
  constexpr int64_t kPiece = 4096;
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(4 * n))
  for (int64_t b = 0; b < n; b += kPiece) {
    const int64_t e = std::min(n, b + kPiece);
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      y[i] = math::gelu_tanh(x[i]);
    }
    if (round_output != DType::F32) round_to_serial(round_output, y + b, y + b, e - b);
  }
}

// `omp simd` also tells the compiler the loop is safe when dx == dy (each lane reads before it writes).
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  TESSERA_PROFILE_SCOPE("gelu_backward");
#pragma omp parallel for simd schedule(static) if (parallel : parallel_worth(4 * n))
  for (int64_t i = 0; i < n; ++i) {
    dx[i] = math::gelu_tanh_backward(x[i], dy[i]);
  }
}

// y = silu(gate) * up, gate the first half of each row and up the second.
void swiglu_forward(const float* x, float* y, int64_t rows, int64_t width, DType round_output) {
  TESSERA_PROFILE_SCOPE("swiglu_forward");
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(4 * rows * width))
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = x + r * 2 * width;
    const float* up = gate + width;
    float* yr = y + r * width;
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) {
      yr[c] = math::swiglu(gate[c], up[c]);
    }
    if (round_output != DType::F32) round_to_serial(round_output, yr, yr, width);
  }
}

void swiglu_backward(const float* x, const float* dy, float* dx, int64_t rows, int64_t width) {
  TESSERA_PROFILE_SCOPE("swiglu_backward");
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(4 * rows * width))
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = x + r * 2 * width;
    const float* up = gate + width;
    const float* dyr = dy + r * width;
    float* dgate = dx + r * 2 * width;
    float* dup = dgate + width;
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) {
      math::swiglu_backward(gate[c], up[c], dyr[c], dgate[c], dup[c]);
    }
  }
}

void tanh_forward(const float* x, float* y, int64_t n) {
  TESSERA_PROFILE_SCOPE("tanh_forward");
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(4 * n))
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

void tanh_backward(const float* y, const float* dy, float* dx, int64_t n) {
  TESSERA_PROFILE_SCOPE("tanh_backward");
#pragma omp parallel for simd schedule(static) if (parallel : parallel_worth(n))
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

}  // namespace tessera::kernels::cpu
