// Rotary position embedding, Megatron's rotate_half layout: dimension i is paired with i + rot_dim/2.
// The per-pair math (frequencies, cos/sin in double, the rotation) is kernels/math/rotary.h, shared with
// a GPU kernel; this is its OpenMP loop.
#include "kernels/cpu/rotary.h"

#include <vector>

#include "core/check.h"
#include "core/profiler.h"
#include "kernels/math/rotary.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {
namespace {

// Rotates every head of every row by +angle (sign = 1) or -angle (sign = -1, the transpose).
void rope_apply(float* x, const int32_t* positions, int64_t rows, int64_t heads, int64_t head_dim, int64_t rot_dim,
                float base, const math::RopeScaling& scaling, double sign) {
  math::check_rope_dims(rot_dim, head_dim);
  const int64_t half = rot_dim / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = math::rope_inv_freq(i, rot_dim, base, scaling);

#pragma omp parallel if (parallel : parallel_worth(2 * rows * heads * rot_dim))
  {
    // cos/sin depend on the row's position only, so they are computed once per row and shared by its heads.
    std::vector<float> cos_t(half), sin_t(half);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const double pos = positions[r];
      for (int64_t i = 0; i < half; ++i) math::rope_cos_sin(pos, inv_freq[i], sign, cos_t[i], sin_t[i]);
      const float* c = cos_t.data();
      const float* s = sin_t.data();
      for (int64_t h = 0; h < heads; ++h) {
        float* lo = x + (r * heads + h) * head_dim;  // x[0, half)
        float* hi = lo + half;                       // x[half, rot_dim); the rest passes through
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) math::rope_rotate_pair(lo[i], hi[i], c[i], s[i]);
      }
    }
  }
}

}  // namespace

void rope_forward(float* x, const int32_t* positions, int64_t rows, int64_t heads, int64_t head_dim,
                  int64_t rot_dim, float base, const math::RopeScaling& scaling) {
  TESSERA_PROFILE_SCOPE("rope_forward");
  rope_apply(x, positions, rows, heads, head_dim, rot_dim, base, scaling, 1.0);
}

// The rotation is orthogonal, so its transpose is the rotation by -angle (math::rope_rotate_pair_backward;
// here the sine is negated once per row instead).
void rope_backward(float* dx, const int32_t* positions, int64_t rows, int64_t heads, int64_t head_dim,
                   int64_t rot_dim, float base, const math::RopeScaling& scaling) {
  TESSERA_PROFILE_SCOPE("rope_backward");
  rope_apply(dx, positions, rows, heads, head_dim, rot_dim, base, scaling, -1.0);
}

}  // namespace tessera::kernels::cpu
