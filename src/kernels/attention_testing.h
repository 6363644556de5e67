// The float64 reference attention and the problem harness the CPU attention tests share:
// attention_test.cc (causal attention, document masks) and attention_bidirectional_test.cc
// (bidirectional attention, padding masks, key slices, shape checks).
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/philox.h"
#include "core/testing.h"
#include "kernels/cpu/attention.h"

namespace tessera::kernels::attention_testing {

// The CPU implementations over host buffers (kernels/cpu/), beside the tensor entry points.
using namespace cpu;

using testing::max_scaled_error;
using testing::random_vector;
using testing::to_double;

// Element (s, b, h, x) of a [seq, batch, heads, d] activation.
inline int64_t at(const AttentionShape& s, int64_t heads, int64_t pos, int64_t b, int64_t h, int64_t x) {
  return ((pos * s.batch + b) * heads + h) * s.head_dim + x;
}

// Dropout factor of probability (b, h, i, j), straight from the definition in attention.h.
inline double reference_factor(const AttentionDropout& drop, const AttentionShape& s, int64_t b, int64_t h, int64_t i,
                        int64_t j) {
  if (drop.p == 0.0f) return 1.0;
  const uint64_t idx = static_cast<uint64_t>(((drop.sample_offset + b) * drop.total_heads + drop.head_offset + h) *
                                                 s.seq * s.seq +
                                             i * s.seq + j);
  return PhiloxStream(drop.seed, drop.stream).uniform(idx) >= drop.p ? 1.0 / (1.0 - drop.p) : 0.0;
}

// Whether query i of sample b sees key j: causal, keys [doc_start (0 without documents), i]; bidirectional,
// every key the padding mask keeps, or with bidirectional_doc_start keys [doc_start, seq).
inline bool sees(const AttentionShape& s, int64_t b, int64_t i, int64_t j) {
  if (!s.causal && s.bidirectional_doc_start) return j >= s.doc_start[b * s.seq + i];
  if (!s.causal) return s.key_valid == nullptr || s.key_valid[b * s.seq + j] != 0;
  return j <= i && j >= (s.doc_start == nullptr ? 0 : s.doc_start[b * s.seq + i]);
}

// Naive float64 attention: the full masked softmax per row, materialised.
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

inline Reference reference_forward(const std::vector<double>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, const AttentionShape& s, double scale,
                                   const AttentionDropout& drop) {
  Reference ref;
  ref.out.assign(q.size(), 0.0);
  ref.lse.assign(s.batch * s.heads * s.seq, 0.0);
  const int64_t group = s.heads / s.kv_heads;
  std::vector<double> p(s.seq);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.seq; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < s.seq; ++j) {
          if (!sees(s, b, i, j)) continue;
          double dot = 0;
          for (int64_t x = 0; x < s.head_dim; ++x)
            dot += q[at(s, s.heads, i, b, h, x)] * k[at(s, s.kv_heads, j, b, h / group, x)];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < s.seq; ++j)
          if (sees(s, b, i, j)) sum += (p[j] = std::exp(p[j] - mx));
        ref.lse[(b * s.heads + h) * s.seq + i] = mx + std::log(sum);
        for (int64_t j = 0; j < s.seq; ++j) {
          if (!sees(s, b, i, j)) continue;
          const double w = p[j] / sum * reference_factor(drop, s, b, h, i, j);
          for (int64_t x = 0; x < s.head_dim; ++x)
            ref.out[at(s, s.heads, i, b, h, x)] += w * v[at(s, s.kv_heads, j, b, h / group, x)];
        }
      }
  return ref;
}

// The analytic backward of reference_forward, also naive: P, dP and dS as full rows.
inline void reference_backward(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                               const std::vector<double>& dout, const AttentionShape& s, double scale,
                               const AttentionDropout& drop, Reference& ref) {
  ref.dq.assign(q.size(), 0.0);
  ref.dk.assign(k.size(), 0.0);
  ref.dv.assign(v.size(), 0.0);
  const int64_t group = s.heads / s.kv_heads;
  std::vector<double> p(s.seq), dp(s.seq);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.seq; ++i) {
        const int64_t kh = h / group;
        const double lse = ref.lse[(b * s.heads + h) * s.seq + i];
        double D = 0;  // sum_j P_ij dP_ij
        for (int64_t j = 0; j < s.seq; ++j) {
          if (!sees(s, b, i, j)) continue;
          double dot = 0, gdot = 0;
          for (int64_t x = 0; x < s.head_dim; ++x) {
            dot += q[at(s, s.heads, i, b, h, x)] * k[at(s, s.kv_heads, j, b, kh, x)];
            gdot += dout[at(s, s.heads, i, b, h, x)] * v[at(s, s.kv_heads, j, b, kh, x)];
          }
          const double z = reference_factor(drop, s, b, h, i, j);
          p[j] = std::exp(dot * scale - lse);
          dp[j] = gdot * z;
          D += p[j] * dp[j];
          for (int64_t x = 0; x < s.head_dim; ++x)
            ref.dv[at(s, s.kv_heads, j, b, kh, x)] += p[j] * z * dout[at(s, s.heads, i, b, h, x)];
        }
        for (int64_t j = 0; j < s.seq; ++j) {
          if (!sees(s, b, i, j)) continue;
          const double dscore = p[j] * (dp[j] - D) * scale;
          for (int64_t x = 0; x < s.head_dim; ++x) {
            ref.dq[at(s, s.heads, i, b, h, x)] += dscore * k[at(s, s.kv_heads, j, b, kh, x)];
            ref.dk[at(s, s.kv_heads, j, b, kh, x)] += dscore * q[at(s, s.heads, i, b, h, x)];
          }
        }
      }
}

// Inputs and the kernel's results for one problem.
struct Problem {
  AttentionShape shape;
  AttentionDropout drop;
  float scale;
  std::vector<float> q, k, v, dout;
  std::vector<float> out, lse, dq, dk, dv;
  std::vector<int32_t> doc;  // doc_start, when set_docs was called (shape.doc_start points into it)
  std::vector<int32_t> valid;  // the padding mask, when set_padding was called (shape.key_valid points into it)

  void set_docs(std::vector<int32_t> d) {
    doc = std::move(d);
    shape.doc_start = doc.data();
  }
  void set_padding(std::vector<int32_t> m) {
    valid = std::move(m);
    shape.key_valid = valid.data();
  }

  Problem(AttentionShape s, float p, uint64_t seed) : shape(s) {
    drop.p = p;
    drop.seed = 1234;
    drop.stream = 77;
    drop.total_heads = s.heads;
    scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    const size_t nq = s.seq * s.batch * s.heads * s.head_dim, nkv = s.seq * s.batch * s.kv_heads * s.head_dim;
    q = random_vector(nq, seed, -2.0f, 2.0f);  // wide enough that the softmax is far from uniform
    k = random_vector(nkv, seed + 1, -2.0f, 2.0f);
    v = random_vector(nkv, seed + 2);
    dout = random_vector(nq, seed + 3);
  }

  void run() {
    // NaN first: the kernel must overwrite every output element.
    out.assign(q.size(), NAN);
    lse.assign(shape.batch * shape.heads * shape.seq, NAN);
    dq.assign(q.size(), NAN);
    dk.assign(k.size(), NAN);
    dv.assign(v.size(), NAN);
    attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), shape, scale, drop);
    attention_backward(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), dq.data(), dk.data(),
                       dv.data(), shape, scale, drop);
  }
};

// Runs the kernel on one problem and compares all five outputs with the float64 reference; `mask`, when
// not empty, is the doc_start mask of causal attention or the padding mask of bidirectional attention
// ([batch, seq]).
inline void expect_matches_reference(const AttentionShape& s, float p, uint64_t seed,
                                     const std::vector<int32_t>& mask = {}) {
  SCOPED_TRACE(::testing::Message() << (s.causal ? "causal" : "bidirectional") << " seq " << s.seq << " kv_heads "
                                    << s.kv_heads << " d " << s.head_dim << " p " << p
                                    << (mask.empty() ? "" : " with a mask"));
  Problem pr(s, p, seed);
  const bool docs = s.causal || s.bidirectional_doc_start;
  if (!mask.empty() && docs) pr.set_docs(mask);
  if (!mask.empty() && !docs) pr.set_padding(mask);
  pr.run();
  const auto q = to_double(pr.q), k = to_double(pr.k), v = to_double(pr.v);
  Reference ref = reference_forward(q, k, v, pr.shape, pr.scale, pr.drop);
  reference_backward(q, k, v, to_double(pr.dout), pr.shape, pr.scale, pr.drop, ref);
  EXPECT_LE(max_scaled_error(pr.out, ref.out, 1e-5, 1e-5), 1.0);
  EXPECT_LE(max_scaled_error(pr.lse, ref.lse, 1e-5, 1e-5), 1.0);
  EXPECT_LE(max_scaled_error(pr.dq, ref.dq, 1e-5, 1e-5), 1.0);
  EXPECT_LE(max_scaled_error(pr.dk, ref.dk, 1e-5, 1e-5), 1.0);
  EXPECT_LE(max_scaled_error(pr.dv, ref.dv, 1e-5, 1e-5), 1.0);
}

// The float64 reference backward of `pr` checked against central differences of its forward, for
// L = sum(out * dout); returns that reference (forward and gradients).
inline Reference expect_reference_gradients_match_differences(const Problem& pr) {
  const auto q = to_double(pr.q), k = to_double(pr.k), v = to_double(pr.v), r = to_double(pr.dout);
  auto loss = [&](const std::vector<double>& qq, const std::vector<double>& kk, const std::vector<double>& vv) {
    Reference f = reference_forward(qq, kk, vv, pr.shape, pr.scale, pr.drop);
    double sum = 0;
    for (size_t i = 0; i < f.out.size(); ++i) sum += f.out[i] * r[i];
    return sum;
  };
  Reference ref = reference_forward(q, k, v, pr.shape, pr.scale, pr.drop);
  reference_backward(q, k, v, r, pr.shape, pr.scale, pr.drop, ref);
  auto gq = testing::numeric_gradient([&](const std::vector<double>& x) { return loss(x, k, v); }, q);
  auto gk = testing::numeric_gradient([&](const std::vector<double>& x) { return loss(q, x, v); }, k);
  auto gv = testing::numeric_gradient([&](const std::vector<double>& x) { return loss(q, k, x); }, v);
  EXPECT_LE(max_scaled_error(ref.dq, gq, 1e-7, 1e-6), 1.0);
  EXPECT_LE(max_scaled_error(ref.dk, gk, 1e-7, 1e-6), 1.0);
  EXPECT_LE(max_scaled_error(ref.dv, gv, 1e-7, 1e-6), 1.0);
  return ref;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace tessera::kernels::attention_testing
