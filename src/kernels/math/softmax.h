// Softmax statistics as the attention and cross-entropy kernels keep them: a running max m and the
// sum l of exp(x - m) over what has been seen. Shared by the CPU kernels and a GPU's (per row, per
// thread or per warp). exp is exp_approx throughout, so host and device agree up to FMA contraction.
#pragma once

#include <math.h>  // logf, which device code has too

#include "core/host_device.h"
#include "kernels/vector_math.h"

namespace tessera::kernels::math {

// exp(x - m): the weight of score x under max m (0 for x = -inf, a masked score).
TESSERA_HOST_DEVICE inline float softmax_weight(float x, float m) { return exp_approx(x - m); }

// The factor that rescales a sum taken under max m_old to one under m_new >= m_old: exp(m_old - m_new),
// 0 when nothing was seen before (m_old = -inf).
TESSERA_HOST_DEVICE inline float softmax_rescale(float m_old, float m_new) { return exp_approx(m_old - m_new); }

// The max to subtract from a row that may have seen only masked scores so far: such a row keeps
// m = -inf, and subtracting 0 instead makes its weights exp(-inf) = 0 rather than exp(-inf + inf) = NaN.
TESSERA_HOST_DEVICE inline float softmax_safe_shift(float m) { return m == -INFINITY ? 0.0f : m; }

// log(sum_j exp(x_j)) from the statistics.
TESSERA_HOST_DEVICE inline float softmax_lse(float m, float l) { return m + logf(l); }

// Statistics of two disjoint parts (tiles of a row, or vocabulary shards) merged into those of their
// union: the larger max, each sum rescaled to it. A part that saw nothing has m = -inf and l = 0.
struct SoftmaxStats {
  float max;
  float sum;
};

TESSERA_HOST_DEVICE inline SoftmaxStats softmax_merge(SoftmaxStats a, SoftmaxStats b) {
  const float m = a.max > b.max ? a.max : b.max;
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.sum * softmax_rescale(a.max, m) + b.sum * softmax_rescale(b.max, m)};
}

// Cross-entropy's gradient with respect to logit x of a row with log-sum-exp lse and loss gradient d:
// (softmax(x) - [x is the target]) * d. The one-hot term is taken before scaling, (p - 1) d, since
// p d - d would lose bits when p is near 1.
TESSERA_HOST_DEVICE inline float cross_entropy_dlogit(float x, float lse, float d) { return exp_approx(x - lse) * d; }
TESSERA_HOST_DEVICE inline float cross_entropy_dlogit_target(float x, float lse, float d) {
  return (exp_approx(x - lse) - 1.0f) * d;
}

}  // namespace tessera::kernels::math
