// The MoE router's work on one token's row of logits [E], shared by the CPU kernels
// (kernels/cpu/moe_routing.cc, one row per OpenMP iteration) and the GPU's (kernels/cuda/moe_routing.cu,
// one row per thread): the selection and probabilities of topk_router_forward, their gradient, the
// aux loss's scores and gradient and the z-loss's log-sum-exp. One definition, so that both run the same
// operations in the same order; the files that use it are compiled without FMA contraction
// (CMakeLists.txt), so the results are the same bits wherever only +, *, / and exp_approx are involved.
// Scratch is the caller's (per-thread vectors on the CPU, a [tokens, ...] buffer on the GPU).
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "kernels/math/moe_routing.h"
#include "kernels/math/softmax.h"
#include "kernels/moe_routing.h"  // TopkRouterOptions, RouterScoreFunction

namespace tessera::kernels::math {

TESSERA_HOST_DEVICE inline float router_row_max(const float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;  // std::max's choice: the first of equals
  return softmax_safe_shift(m);  // a row of -inf only: weights 0, not NaN
}

// p = softmax(x) over the n entries.
TESSERA_HOST_DEVICE inline void router_softmax_row(const float* x, int64_t n, float* p) {
  const float m = router_row_max(x, n);
  float s = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    p[j] = softmax_weight(x[j], m);
    s += p[j];
  }
  for (int64_t j = 0; j < n; ++j) p[j] /= s;
}

// The aux loss's scores of a row (compute_routing_scores_for_aux_loss): softmax, or sigmoid over its
// sum + eps. Returns that divisor for the sigmoid (its gradient needs it), 1 for the softmax.
TESSERA_HOST_DEVICE inline float aux_scores_row(const float* x, int64_t n, RouterScoreFunction score, float* p) {
  if (score == RouterScoreFunction::Softmax) {
    router_softmax_row(x, n, p);
    return 1.0f;
  }
  float s = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    p[j] = router_sigmoid(x[j]);
    s += p[j];
  }
  const float d = s + kRouterScoreSumEps;
  for (int64_t j = 0; j < n; ++j) p[j] /= d;
  return d;
}

// The k best of v[0, n) into idx (descending, ties to the lower index) and their values into vals.
TESSERA_HOST_DEVICE inline void topk_row(const float* v, int64_t n, int64_t k, float* vals, int32_t* idx) {
  int64_t have = 0;
  for (int64_t j = 0; j < n; ++j) topk_insert(v[j], static_cast<int32_t>(j), k, have, vals, idx);
}

TESSERA_HOST_DEVICE inline float router_row_lse(const float* x, int64_t n) {
  const float m = router_row_max(x, n);
  float s = 0.0f;
  for (int64_t j = 0; j < n; ++j) s += softmax_weight(x[j], m);
  return softmax_lse(m, s);
}

// The scratch of one row of topk_router_forward: scores/sel [E], vals [k], and group-limited routing's
// group_scores [groups], group_vals/group_idx [group_topk], part_vals/part_idx [k / group_topk].
struct RouterRowScratch {
  float *scores, *sel, *vals, *group_scores, *group_vals, *part_vals;
  int32_t *group_idx, *part_idx;
};

// One token's indices idx [k] and probs p [k] (kernels/moe_routing.h has the rules).
TESSERA_HOST_DEVICE inline void router_forward_row(const float* x, int64_t E, const TopkRouterOptions& opt,
                                                   const float* expert_bias, const RouterRowScratch& s,
                                                   int32_t* idx, float* p) {
  const int64_t k = opt.topk;
  const bool softmax = opt.score == RouterScoreFunction::Softmax;
  // The k best selection scores of v into idx (values into s.vals), group-limited if asked.
  auto select = [&](const float* v) {
    if (opt.group_topk > 0)  // not opt.grouped(): a host function
      group_limited_topk(v, E, k, opt.num_groups, opt.group_topk, s.group_scores, s.group_vals, s.group_idx,
                         s.part_vals, s.part_idx, s.vals, idx);
    else
      topk_row(v, E, k, s.vals, idx);
  };
  if (softmax && !opt.pre_softmax) {  // top-k of the logits, softmax over those k
    select(x);
    const float m = router_row_max(s.vals, k);
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      p[j] = softmax_weight(s.vals[j], m);
      sum += p[j];
    }
    for (int64_t j = 0; j < k; ++j) p[j] /= sum;
  } else if (softmax) {  // softmax over all E, top-k of that
    router_softmax_row(x, E, s.scores);
    select(s.scores);
    for (int64_t j = 0; j < k; ++j) p[j] = s.vals[j];
  } else {  // top-k of the sigmoids (plus the bias), the unbiased ones renormalised over the k when k > 1
    for (int64_t j = 0; j < E; ++j) s.scores[j] = router_sigmoid(x[j]);
    const float* v = s.scores;
    if (expert_bias) {
      for (int64_t j = 0; j < E; ++j) s.sel[j] = s.scores[j] + expert_bias[j];
      v = s.sel;
    }
    select(v);
    for (int64_t j = 0; j < k; ++j) p[j] = s.scores[idx[j]];
    if (k > 1) {
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) sum += p[j];
      const float d = sum + kRouterScoreSumEps;
      for (int64_t j = 0; j < k; ++j) p[j] /= d;
    }
  }
  for (int64_t j = 0; j < k; ++j) p[j] *= opt.scaling_factor;
}

// dx [E] += d(probs)/d(logits)^T dprobs for one token (its chosen experts idx [k] held fixed), the
// forward's probabilities recomputed in its order. Scratch: full/gfull [E], p/g [k].
TESSERA_HOST_DEVICE inline void router_backward_row(const float* x, const int32_t* idx, const float* dprobs, int64_t E,
                                                    const TopkRouterOptions& opt, float* full, float* gfull, float* p,
                                                    float* g, float* dx) {
  const int64_t k = opt.topk;
  const bool softmax = opt.score == RouterScoreFunction::Softmax;
  for (int64_t j = 0; j < k; ++j) g[j] = opt.scaling_factor * dprobs[j];
  if (softmax && !opt.pre_softmax) {
    for (int64_t j = 0; j < k; ++j) p[j] = x[idx[j]];
    const float m = router_row_max(p, k);
    float s = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      p[j] = softmax_weight(p[j], m);
      s += p[j];
    }
    float gp = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      p[j] /= s;
      gp += g[j] * p[j];
    }
    for (int64_t j = 0; j < k; ++j) dx[idx[j]] += softmax_grad(p[j], g[j], gp);
  } else if (softmax) {  // every logit moves the chosen probabilities through the full softmax
    router_softmax_row(x, E, full);
    for (int64_t i = 0; i < E; ++i) gfull[i] = 0.0f;
    float gp = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      gfull[idx[j]] += g[j];
      gp += g[j] * full[idx[j]];
    }
    for (int64_t i = 0; i < E; ++i) dx[i] += softmax_grad(full[i], gfull[i], gp);
  } else if (k == 1) {
    dx[idx[0]] += g[0] * router_sigmoid_grad(x[idx[0]]);
  } else {
    float s = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      p[j] = router_sigmoid(x[idx[j]]);
      s += p[j];
    }
    const float d = s + kRouterScoreSumEps;
    float gp = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      p[j] /= d;
      gp += g[j] * p[j];
    }
    for (int64_t j = 0; j < k; ++j) dx[idx[j]] += normalised_grad(g[j], gp, d) * router_sigmoid_grad(x[idx[j]]);
  }
}

// One token's term of the aux loss, sum_i p_ti n_i (n: its group's counts), in double. Scratch p [E].
TESSERA_HOST_DEVICE inline double aux_loss_token(const float* x, const float* n, int64_t E, RouterScoreFunction score,
                                                 float* p) {
  aux_scores_row(x, E, score, p);
  double r = 0;
  for (int64_t i = 0; i < E; ++i) r += static_cast<double>(p[i]) * n[i];
  return r;
}

// dx [E] += the aux loss's gradient for one token, c = coeff * dloss * the loss's scale (dL/dp_i = c n_i).
TESSERA_HOST_DEVICE inline void aux_loss_backward_row(const float* x, const float* n, int64_t E,
                                                      RouterScoreFunction score, float c, float* p, float* dx) {
  const float d = aux_scores_row(x, E, score, p);
  float gp = 0.0f;
  for (int64_t i = 0; i < E; ++i) gp += c * n[i] * p[i];
  if (score == RouterScoreFunction::Softmax) {
    for (int64_t i = 0; i < E; ++i) dx[i] += softmax_grad(p[i], c * n[i], gp);
  } else {
    for (int64_t i = 0; i < E; ++i) dx[i] += normalised_grad(c * n[i], gp, d) * router_sigmoid_grad(x[i]);
  }
}

}  // namespace tessera::kernels::math
