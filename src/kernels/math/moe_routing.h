// The per-element arithmetic of the MoE router (kernels/moe_routing.h), shared by the CPU kernels
// (kernels/cpu/moe_routing.cc, one row per thread) and a GPU's (one row per thread or warp): the
// sigmoid score and its derivative, the top-k insertion whose tie order every backend must share, the
// gradients through a normalisation, group-limited top-k, and the input jitter's multiplier from dropout's
// uniform.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "kernels/math/dropout.h"
#include "kernels/vector_math.h"

namespace tessera::kernels::math {

// Megatron adds this to a row's sum of sigmoid scores before dividing by it (the top-k probs when
// k > 1 and the aux loss's scores), so a row whose sigmoids all underflow gives 0 rather than NaN.
inline constexpr float kRouterScoreSumEps = 1e-20f;

// sigmoid(x) with exp_approx; exp_approx clamps its argument at 87, so this never divides by inf.
TESSERA_HOST_DEVICE inline float router_sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

// d sigmoid / dx = s (1 - s), with 1 - s as e * s (e = exp(-x)): subtracting would lose all the
// digits where s is close to 1.
TESSERA_HOST_DEVICE inline float router_sigmoid_grad(float x) {
  const float e = exp_approx(-x);
  const float s = 1.0f / (1.0f + e);
  return e * s * s;
}

// Offers expert e of score v to the list vals/idx of the n (<= k) best so far, kept in descending
// order. A score only displaces a strictly smaller one, so of equal scores the expert offered first
// (the lower one, when experts are offered in order) ranks first. The list always fills with k
// distinct experts, NaN scores included (their place in the order is then unspecified).
TESSERA_HOST_DEVICE inline void topk_insert(float v, int32_t e, int64_t k, int64_t& n, float* vals, int32_t* idx) {
  int64_t p;
  if (n < k) {
    p = n++;
  } else if (v > vals[k - 1]) {
    p = k - 1;
  } else {
    return;
  }
  while (p > 0 && v > vals[p - 1]) {
    vals[p] = vals[p - 1];
    idx[p] = idx[p - 1];
    --p;
  }
  vals[p] = v;
  idx[p] = e;
}

// Group-limited top-k (Megatron's group_limited_topk; DeepSeek's device- and node-limited routing): the
// E experts form `groups` groups of E / groups consecutive experts; a group's score is the sum of its
// (k / group_topk) best selection scores, added in descending order; the group_topk best groups are
// kept (ties to the lower group) and the k best experts of those go into vals/idx (descending, ties to
// the lower expert), as a top-k over the scores with every other group masked to -inf. Scratch:
// group_scores [groups], group_vals [group_topk], group_idx [group_topk], part_vals/part_idx
// [k / group_topk]. The caller ensures groups | E, group_topk | k and k / group_topk <= E / groups.
TESSERA_HOST_DEVICE inline void group_limited_topk(const float* sel, int64_t E, int64_t k, int64_t groups,
                                                   int64_t group_topk, float* group_scores, float* group_vals,
                                                   int32_t* group_idx, float* part_vals, int32_t* part_idx,
                                                   float* vals, int32_t* idx) {
  const int64_t per_group = E / groups, part = k / group_topk;
  for (int64_t g = 0; g < groups; ++g) {
    int64_t n = 0;
    for (int64_t j = 0; j < per_group; ++j)
      topk_insert(sel[g * per_group + j], static_cast<int32_t>(j), part, n, part_vals, part_idx);
    float s = 0.0f;
    for (int64_t j = 0; j < part; ++j) s += part_vals[j];
    group_scores[g] = s;
  }
  int64_t kept = 0;
  for (int64_t g = 0; g < groups; ++g)
    topk_insert(group_scores[g], static_cast<int32_t>(g), group_topk, kept, group_vals, group_idx);
  // The kept groups in ascending order, so that experts are offered lowest first (the tie order).
  for (int64_t a = 1; a < group_topk; ++a)
    for (int64_t b = a; b > 0 && group_idx[b - 1] > group_idx[b]; --b) {
      const int32_t t = group_idx[b];
      group_idx[b] = group_idx[b - 1];
      group_idx[b - 1] = t;
    }
  int64_t n = 0;
  for (int64_t a = 0; a < group_topk; ++a)
    for (int64_t j = 0; j < per_group; ++j) {
      const int64_t e = group_idx[a] * per_group + j;
      topk_insert(sel[e], static_cast<int32_t>(e), k, n, vals, idx);
    }
}

// Through a softmax p = softmax(x): dL/dx_i = p_i (g_i - gp), g = dL/dp, gp = sum_j g_j p_j.
TESSERA_HOST_DEVICE inline float softmax_grad(float p, float g, float gp) { return p * (g - gp); }

// Through a normalisation p_j = q_j / d, d = sum_j q_j (+ eps): dL/dq_m = (g_m - gp) / d, with
// g = dL/dp and gp = sum_j g_j p_j.
TESSERA_HOST_DEVICE inline float normalised_grad(float g, float gp, float d) { return (g - gp) / d; }

// The z-loss's d(lse^2)/dx_i = 2 lse softmax_i, times the scale c (coeff * dloss / tokens).
TESSERA_HOST_DEVICE inline float z_loss_dlogit(float x, float lse, float c) {
  return 2.0f * c * lse * exp_approx(x - lse);
}

// The input jitter's multiplier U(1 - eps, 1 + eps) from the element's Philox word: 1 - eps + 2 eps u
// with u = dropout_uniform(bits), the uniform dropout draws for the same (seed, stream, element).
TESSERA_HOST_DEVICE inline float jitter_factor(uint32_t bits, float eps) {
  return (1.0f - eps) + 2.0f * eps * dropout_uniform(bits);
}

}  // namespace tessera::kernels::math
