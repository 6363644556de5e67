#include "kernels/cpu/attention.h"

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

namespace tessera::kernels {
namespace {

// The CPU implementations over host buffers (kernels/cpu/), beside the tensor entry points.
using namespace cpu;

using testing::max_scaled_error;
using testing::random_vector;
using testing::to_double;

// Element (s, b, h, x) of a [seq, batch, heads, d] activation.
int64_t at(const AttentionShape& s, int64_t heads, int64_t pos, int64_t b, int64_t h, int64_t x) {
  return ((pos * s.batch + b) * heads + h) * s.head_dim + x;
}

// Dropout factor of probability (b, h, i, j), straight from the definition in attention.h.
double reference_factor(const AttentionDropout& drop, const AttentionShape& s, int64_t b, int64_t h, int64_t i,
                        int64_t j) {
  if (drop.p == 0.0f) return 1.0;
  const uint64_t idx = static_cast<uint64_t>(((drop.sample_offset + b) * drop.total_heads + drop.head_offset + h) *
                                                 s.seq * s.seq +
                                             i * s.seq + j);
  return PhiloxStream(drop.seed, drop.stream).uniform(idx) >= drop.p ? 1.0 / (1.0 - drop.p) : 0.0;
}

// Whether query i of sample b sees key j: causal, keys [doc_start (0 without documents), i]; bidirectional,
// every key the padding mask keeps, or with bidirectional_doc_start keys [doc_start, seq).
bool sees(const AttentionShape& s, int64_t b, int64_t i, int64_t j) {
  if (!s.causal && s.bidirectional_doc_start) return j >= s.doc_start[b * s.seq + i];
  if (!s.causal) return s.key_valid == nullptr || s.key_valid[b * s.seq + j] != 0;
  return j <= i && j >= (s.doc_start == nullptr ? 0 : s.doc_start[b * s.seq + i]);
}

// Naive float64 attention: the full masked softmax per row, materialised.
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

Reference reference_forward(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                            const AttentionShape& s, double scale, const AttentionDropout& drop) {
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
void reference_backward(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
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
void expect_matches_reference(const AttentionShape& s, float p, uint64_t seed, const std::vector<int32_t>& mask = {}) {
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

TEST(Attention, MatchesFloat64Reference) {
  const int64_t seqs[] = {1, 7, 67, 130};  // around and across the 64-row tile
  const int64_t kv_heads[] = {4, 2, 1};    // MHA, GQA, MQA
  const int64_t dims[] = {8, 16, 64};      // each seq meets every head_dim across the kv_heads
  for (int si = 0; si < 4; ++si)
    for (int ki = 0; ki < 3; ++ki)
      for (float p : {0.0f, 0.1f}) {
        AttentionShape s{.seq = seqs[si], .batch = 2, .heads = 4, .kv_heads = kv_heads[ki],
                         .head_dim = dims[(si + ki) % 3]};
        expect_matches_reference(s, p, 100 * si + 10 * ki + (p > 0));
      }
}

// Head dims that are not a multiple of the 64/16/8-wide vector chunks exercise the remainder loops.
TEST(Attention, MatchesFloat64ReferenceOddHeadDims) {
  for (int64_t d : {3, 12, 80})
    expect_matches_reference({.seq = 67, .batch = 1, .heads = 2, .kv_heads = 1, .head_dim = d}, 0.1f, 50 + d);
}

// The reference backward is itself checked against finite differences of L = sum(out * R).
TEST(Attention, ReferenceBackwardMatchesNumericGradient) {
  for (float p : {0.0f, 0.3f}) {
    for (int64_t kv : {2, 1}) {
      AttentionShape s{.seq = 5, .batch = 2, .heads = 2, .kv_heads = kv, .head_dim = 3};
      SCOPED_TRACE(::testing::Message() << "p " << p << " kv_heads " << kv);
      Problem pr(s, p, 7 + kv);
      const auto q = to_double(pr.q), k = to_double(pr.k), v = to_double(pr.v), r = to_double(pr.dout);
      auto loss = [&](const std::vector<double>& qq, const std::vector<double>& kk, const std::vector<double>& vv) {
        Reference f = reference_forward(qq, kk, vv, s, pr.scale, pr.drop);
        double sum = 0;
        for (size_t i = 0; i < f.out.size(); ++i) sum += f.out[i] * r[i];
        return sum;
      };
      Reference ref = reference_forward(q, k, v, s, pr.scale, pr.drop);
      reference_backward(q, k, v, r, s, pr.scale, pr.drop, ref);
      auto gq = testing::numeric_gradient([&](const std::vector<double>& x) { return loss(x, k, v); }, q);
      auto gk = testing::numeric_gradient([&](const std::vector<double>& x) { return loss(q, x, v); }, k);
      auto gv = testing::numeric_gradient([&](const std::vector<double>& x) { return loss(q, k, x); }, v);
      EXPECT_LE(max_scaled_error(ref.dq, gq, 1e-7, 1e-6), 1.0);
      EXPECT_LE(max_scaled_error(ref.dk, gk, 1e-7, 1e-6), 1.0);
      EXPECT_LE(max_scaled_error(ref.dv, gv, 1e-7, 1e-6), 1.0);
    }
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Attention, BitwiseIdenticalAcrossThreadCounts) {
  AttentionShape s{.seq = 130, .batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 16};
  Problem one(s, 0.1f, 5), two(s, 0.1f, 5);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  one.run();
  omp_set_num_threads(2);
  two.run();
  omp_set_num_threads(saved);
  EXPECT_TRUE(same_bits(one.out, two.out));
  EXPECT_TRUE(same_bits(one.lse, two.lse));
  EXPECT_TRUE(same_bits(one.dq, two.dq));
  EXPECT_TRUE(same_bits(one.dk, two.dk));
  EXPECT_TRUE(same_bits(one.dv, two.dv));
}

// Copies heads [h0, h0 + nh) of samples [b0, b0 + nb) out of a [seq, batch, heads, d] tensor.
std::vector<float> slice(const std::vector<float>& x, const AttentionShape& s, int64_t heads, int64_t b0, int64_t nb,
                         int64_t h0, int64_t nh) {
  std::vector<float> y;
  for (int64_t pos = 0; pos < s.seq; ++pos)
    for (int64_t b = b0; b < b0 + nb; ++b)
      for (int64_t h = h0; h < h0 + nh; ++h)
        for (int64_t x_ = 0; x_ < s.head_dim; ++x_) y.push_back(x[at(s, heads, pos, b, h, x_)]);
  return y;
}

// Tensor parallelism hands each rank a slice of the heads, data parallelism a slice of the samples:
// with the offsets set, the slice must compute exactly what the full problem computes for it.
TEST(Attention, DropoutMaskIsLayoutIndependent) {
  AttentionShape full_shape{.seq = 70, .batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 8};
  Problem full(full_shape, 0.2f, 11);
  full.run();

  // Heads [2, 4) of sample 1 share kv head 1.
  AttentionShape part_shape{.seq = 70, .batch = 1, .heads = 2, .kv_heads = 1, .head_dim = 8};
  Problem part(part_shape, 0.2f, 0);
  part.q = slice(full.q, full_shape, 4, 1, 1, 2, 2);
  part.dout = slice(full.dout, full_shape, 4, 1, 1, 2, 2);
  part.k = slice(full.k, full_shape, 2, 1, 1, 1, 1);
  part.v = slice(full.v, full_shape, 2, 1, 1, 1, 1);
  part.drop.total_heads = 4;
  part.drop.head_offset = 2;
  part.drop.sample_offset = 1;
  part.run();

  EXPECT_TRUE(same_bits(part.out, slice(full.out, full_shape, 4, 1, 1, 2, 2)));
  EXPECT_TRUE(same_bits(part.dq, slice(full.dq, full_shape, 4, 1, 1, 2, 2)));
  EXPECT_TRUE(same_bits(part.dk, slice(full.dk, full_shape, 2, 1, 1, 1, 1)));
  EXPECT_TRUE(same_bits(part.dv, slice(full.dv, full_shape, 2, 1, 1, 1, 1)));
  std::vector<float> lse_full(full.lse.begin() + (1 * 4 + 2) * 70, full.lse.begin() + (1 * 4 + 4) * 70);
  EXPECT_TRUE(same_bits(part.lse, lse_full));

  // And the mask does depend on the offsets (a wrong head_offset gives a different output).
  Problem wrong = part;
  wrong.drop.head_offset = 0;
  wrong.run();
  EXPECT_FALSE(same_bits(wrong.out, part.out));
}

// doc_start of `batch` samples of length seq whose documents begin at the given positions (0 is always a
// start; sample b uses starts[b % starts.size()]), as Megatron's reset_attention_mask derives them from
// the end-of-document tokens.
std::vector<int32_t> doc_starts(int64_t seq, int64_t batch, const std::vector<std::vector<int64_t>>& starts) {
  std::vector<int32_t> doc(seq * batch);
  for (int64_t b = 0; b < batch; ++b) {
    const auto& st = starts[b % starts.size()];
    int32_t cur = 0;
    for (int64_t i = 0; i < seq; ++i) {
      if (std::find(st.begin(), st.end(), i) != st.end()) cur = static_cast<int32_t>(i);
      doc[b * seq + i] = cur;
    }
  }
  return doc;
}

// Random document starts: each position after 0 starts a document with probability `density`.
std::vector<int64_t> random_starts(int64_t seq, double density, uint64_t seed) {
  PhiloxStream rng(seed, 3);
  std::vector<int64_t> st;
  for (int64_t i = 1; i < seq; ++i)
    if (rng.uniform(static_cast<uint64_t>(i)) < density) st.push_back(i);
  return st;
}

TEST(Attention, DocumentMaskMatchesFloat64Reference) {
  const int64_t seqs[] = {7, 67, 130, 200};  // within one tile, across two, three and four (none a multiple of 64)
  const int64_t kv_heads[] = {4, 2, 1};      // MHA, GQA, MQA
  const int64_t dims[] = {8, 16, 64, 12};
  int case_id = 0;
  for (int si = 0; si < 4; ++si) {
    const int64_t seq = seqs[si];
    // Layouts, one list of starts per sample (the two samples differ): none but 0; dense (several
    // boundaries in every tile, single-token documents); sparse (documents spanning tiles); boundaries
    // right at and around the tile edges and the last position.
    const std::vector<std::vector<std::vector<int64_t>>> layouts = {
        {{}, {1}},
        {random_starts(seq, 0.15, 10 + si), random_starts(seq, 0.3, 20 + si)},
        {random_starts(seq, 0.015, 30 + si), {seq / 2}},
        {{1, 2, 3, 63, 64, 65, 127, 128, 129, seq - 1}, {5, 60, 70, 130, 190}},
    };
    for (size_t li = 0; li < layouts.size(); ++li)
      for (int ki = 0; ki < 3; ++ki)
        for (float p : {0.0f, 0.1f}) {
          if ((si + ki + static_cast<int>(li)) % 2 == 1 && seq >= 130) continue;  // keep the run short
          AttentionShape s{.seq = seq, .batch = 2, .heads = 4, .kv_heads = kv_heads[ki],
                           .head_dim = dims[(si + ki + static_cast<int>(li)) % 4]};
          SCOPED_TRACE(::testing::Message() << "layout " << li);
          expect_matches_reference(s, p, 1000 + case_id++, doc_starts(seq, 2, layouts[li]));
        }
  }
}

// The masked reference backward against finite differences, with a single-token document and one
// spanning the end.
TEST(Attention, DocumentMaskReferenceBackwardMatchesNumericGradient) {
  for (float p : {0.0f, 0.3f}) {
    for (int64_t kv : {2, 1}) {
      AttentionShape s{.seq = 7, .batch = 2, .heads = 2, .kv_heads = kv, .head_dim = 3};
      SCOPED_TRACE(::testing::Message() << "p " << p << " kv_heads " << kv);
      Problem pr(s, p, 17 + kv);
      pr.set_docs(doc_starts(7, 2, {{3, 4}, {2, 6}}));
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
      // And the mask matters: the masked reference differs from the plain causal one.
      AttentionShape plain = s;
      Reference causal = reference_forward(q, k, v, plain, pr.scale, pr.drop);
      EXPECT_GT(max_scaled_error(ref.out, causal.out, 1e-7, 1e-6), 1.0);
    }
  }
}

// Without dropout, a document sees nothing of the others: attention over packed documents equals
// attention over each document alone, here a document starting at 100 run as its own sequence.
TEST(Attention, DocumentMaskEqualsSeparateSequences) {
  AttentionShape s{.seq = 170, .batch = 1, .heads = 2, .kv_heads = 1, .head_dim = 16};
  Problem packed(s, 0.0f, 41);
  packed.set_docs(doc_starts(170, 1, {{100}}));
  packed.run();
  AttentionShape tail_shape{.seq = 70, .batch = 1, .heads = 2, .kv_heads = 1, .head_dim = 16};
  Problem tail(tail_shape, 0.0f, 0);
  auto from = [](const std::vector<float>& x, int64_t pos, int64_t per_pos) {
    return std::vector<float>(x.begin() + pos * per_pos, x.end());
  };
  tail.q = from(packed.q, 100, 2 * 16);
  tail.dout = from(packed.dout, 100, 2 * 16);
  tail.k = from(packed.k, 100, 16);
  tail.v = from(packed.v, 100, 16);
  tail.run();
  // Different tilings of the same keys: equal to rounding, not bitwise.
  EXPECT_LE(max_scaled_error(tail.out, from(packed.out, 100, 2 * 16), 1e-6, 1e-5), 1.0);
  EXPECT_LE(max_scaled_error(tail.dq, from(packed.dq, 100, 2 * 16), 1e-6, 1e-5), 1.0);
  EXPECT_LE(max_scaled_error(tail.dk, from(packed.dk, 100, 16), 1e-6, 1e-5), 1.0);
  EXPECT_LE(max_scaled_error(tail.dv, from(packed.dv, 100, 16), 1e-6, 1e-5), 1.0);
  // Keys of the tail document get no gradient from the first document's queries and vice versa: the
  // first document's dK, dV are those of a 100-token sequence.
  AttentionShape head_shape{.seq = 100, .batch = 1, .heads = 2, .kv_heads = 1, .head_dim = 16};
  Problem head(head_shape, 0.0f, 0);
  auto upto = [](const std::vector<float>& x, int64_t pos, int64_t per_pos) {
    return std::vector<float>(x.begin(), x.begin() + pos * per_pos);
  };
  head.q = upto(packed.q, 100, 2 * 16);
  head.dout = upto(packed.dout, 100, 2 * 16);
  head.k = upto(packed.k, 100, 16);
  head.v = upto(packed.v, 100, 16);
  head.run();
  EXPECT_TRUE(same_bits(head.out, upto(packed.out, 100, 2 * 16)));
  EXPECT_LE(max_scaled_error(head.dk, upto(packed.dk, 100, 16), 1e-6, 1e-5), 1.0);
  EXPECT_LE(max_scaled_error(head.dv, upto(packed.dv, 100, 16), 1e-6, 1e-5), 1.0);
}

// doc_start all zeros is the plain causal mask, and takes exactly the same path: bitwise equal.
TEST(Attention, ZeroDocStartIsBitwiseCausal) {
  for (float p : {0.0f, 0.1f}) {
    AttentionShape s{.seq = 130, .batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 16};
    Problem plain(s, p, 23), zeros(s, p, 23);
    zeros.set_docs(std::vector<int32_t>(130 * 2, 0));
    plain.run();
    zeros.run();
    EXPECT_TRUE(same_bits(plain.out, zeros.out));
    EXPECT_TRUE(same_bits(plain.lse, zeros.lse));
    EXPECT_TRUE(same_bits(plain.dq, zeros.dq));
    EXPECT_TRUE(same_bits(plain.dk, zeros.dk));
    EXPECT_TRUE(same_bits(plain.dv, zeros.dv));
  }
}

TEST(Attention, DocumentMaskBitwiseIdenticalAcrossThreadCounts) {
  AttentionShape s{.seq = 200, .batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 16};
  const auto doc = doc_starts(200, 2, {{3, 64, 65, 150}, random_starts(200, 0.05, 9)});
  Problem one(s, 0.1f, 5), two(s, 0.1f, 5);
  one.set_docs(doc);
  two.set_docs(doc);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  one.run();
  omp_set_num_threads(2);
  two.run();
  omp_set_num_threads(saved);
  EXPECT_TRUE(same_bits(one.out, two.out));
  EXPECT_TRUE(same_bits(one.lse, two.lse));
  EXPECT_TRUE(same_bits(one.dq, two.dq));
  EXPECT_TRUE(same_bits(one.dk, two.dk));
  EXPECT_TRUE(same_bits(one.dv, two.dv));
}

TEST(Attention, RejectsBadDocStart) {
  AttentionShape s{.seq = 6, .batch = 2, .heads = 2, .kv_heads = 1, .head_dim = 8};
  Problem pr(s, 0.0f, 1);
  pr.run();  // valid without a mask; now break the mask in sample 1 in each way
  const std::vector<int32_t> good = doc_starts(6, 2, {{2}, {1, 4}});
  for (int bad = 0; bad < 4; ++bad) {
    std::vector<int32_t> doc = good;
    if (bad == 0) doc[6 + 3] = 4;   // doc_start > i
    if (bad == 1) doc[6 + 5] = 1;   // decreasing (4 then 1)
    if (bad == 2) doc[6 + 0] = -1;  // negative
    if (bad == 3) doc[0] = 1;       // position 0 can only start at 0
    SCOPED_TRACE(::testing::Message() << "case " << bad);
    AttentionShape bs = s;
    bs.doc_start = doc.data();
    EXPECT_THROW(attention_forward(pr.q.data(), pr.k.data(), pr.v.data(), pr.out.data(), pr.lse.data(), bs,
                                   pr.scale, pr.drop),
                 Error);
    EXPECT_THROW(attention_backward(pr.q.data(), pr.k.data(), pr.v.data(), pr.out.data(), pr.lse.data(),
                                    pr.dout.data(), pr.dq.data(), pr.dk.data(), pr.dv.data(), bs, pr.scale, pr.drop),
                 Error);
  }
  AttentionShape gs = s;
  gs.doc_start = good.data();
  EXPECT_NO_THROW(attention_forward(pr.q.data(), pr.k.data(), pr.v.data(), pr.out.data(), pr.lse.data(), gs,
                                    pr.scale, pr.drop));
}

// A padding mask per sample: sample b keeps its first lengths[b % lengths.size()] keys (BERT's trailing
// padding), or with `scattered` a random subset (position 0 always kept).
std::vector<int32_t> padding_mask(int64_t seq, int64_t batch, const std::vector<int64_t>& lengths, bool scattered,
                                  uint64_t seed) {
  std::vector<int32_t> m(seq * batch);
  PhiloxStream rng(seed, 9);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < seq; ++j)
      m[b * seq + j] = scattered ? (j == 0 || rng.uniform(static_cast<uint64_t>(b * seq + j)) < 0.6)
                                 : j < lengths[b % lengths.size()];
  return m;
}

TEST(Attention, BidirectionalMatchesFloat64Reference) {
  const int64_t seqs[] = {1, 7, 67, 130, 200};
  const int64_t kv_heads[] = {4, 2, 1};
  const int64_t dims[] = {8, 16, 64, 12};
  int case_id = 0;
  for (int si = 0; si < 5; ++si) {
    const int64_t seq = seqs[si];
    const std::vector<int64_t> lengths{seq, std::max<int64_t>(1, seq / 3), std::max<int64_t>(1, seq - 65)};
    for (int ki = 0; ki < 3; ++ki)
      for (float p : {0.0f, 0.1f}) {
        AttentionShape s{.seq = seq, .batch = 3, .heads = 4, .kv_heads = kv_heads[ki],
                         .head_dim = dims[(si + ki) % 4]};
        s.causal = false;
        ++case_id;
        expect_matches_reference(s, p, 300 + case_id, {});
        expect_matches_reference(s, p, 400 + case_id, padding_mask(seq, 3, lengths, false, case_id));
        expect_matches_reference(s, p, 500 + case_id, padding_mask(seq, 3, lengths, true, case_id));
      }
  }
}

// bidirectional_doc_start (a context-parallel query chunk against an earlier key chunk under document
// masks): query i sees keys [doc_start_i, seq), the first key anywhere from 0 to the last, across tiles.
std::vector<int32_t> first_keys(int64_t seq, int64_t batch) {
  std::vector<int32_t> doc(seq * batch);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < seq; ++i) doc[b * seq + i] = static_cast<int32_t>(std::min(seq - 1, (3 * i + 5 * b) / 4));
  return doc;
}

TEST(Attention, BidirectionalDocumentStartMatchesFloat64Reference) {
  int case_id = 0;
  for (int64_t seq : {1, 7, 130})
    for (int64_t kv_heads : {4, 1})
      for (float p : {0.0f, 0.1f}) {
        AttentionShape s{.seq = seq, .batch = 3, .heads = 4, .kv_heads = kv_heads, .head_dim = 16};
        s.causal = false;
        s.bidirectional_doc_start = true;
        expect_matches_reference(s, p, 700 + ++case_id, first_keys(seq, 3));
      }
}

// A row whose first key is past the last (doc_start = seq) sees nothing: a zero output and lse -inf,
// which attention_merge_into ignores; the other rows are unaffected, and backward skips it.
TEST(Attention, BidirectionalDocumentStartPastEveryKeyIsAnEmptyRow) {
  AttentionShape s{.seq = 70, .batch = 2, .heads = 2, .kv_heads = 1, .head_dim = 8};
  s.causal = false;
  s.bidirectional_doc_start = true;
  std::vector<int32_t> doc = first_keys(70, 2);
  for (int64_t i = 60; i < 70; ++i) doc[70 + i] = 70;  // sample 1's last 10 queries
  Problem pr(s, 0.1f, 9);
  pr.set_docs(doc);
  pr.run();
  for (int64_t i = 0; i < 70; ++i)
    for (int64_t h = 0; h < 2; ++h) {
      const float lse = pr.lse[(1 * 2 + h) * 70 + i];
      if (i < 60) {
        EXPECT_TRUE(std::isfinite(lse)) << i;
        continue;
      }
      EXPECT_EQ(lse, -INFINITY) << i;
      for (int64_t x = 0; x < 8; ++x) EXPECT_EQ(pr.out[at(s, 2, i, 1, h, x)], 0.0f) << i;
    }
  for (float g : pr.dq) EXPECT_TRUE(std::isfinite(g));
  for (float g : pr.dk) EXPECT_TRUE(std::isfinite(g));
}

TEST(Attention, BidirectionalReferenceBackwardMatchesNumericGradient) {
  for (float p : {0.0f, 0.3f}) {
    AttentionShape s{.seq = 6, .batch = 2, .heads = 2, .kv_heads = 1, .head_dim = 3};
    s.causal = false;
    SCOPED_TRACE(::testing::Message() << "p " << p);
    Problem pr(s, p, 17);
    pr.set_padding(padding_mask(6, 2, {6, 4}, false, 0));
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
    // Padded keys get no gradient: nothing attends to them.
    for (int64_t j = 4; j < 6; ++j)
      for (int64_t x = 0; x < 3; ++x) EXPECT_EQ(ref.dk[at(s, 1, j, 1, 0, x)], 0.0);
  }
}

// A sample padded to seq equals the same sample alone at its true length (the padding changes nothing).
TEST(Attention, PaddingEqualsTheShorterSequence) {
  const int64_t seq = 130, len = 70, d = 16;
  AttentionShape padded{.seq = seq, .batch = 1, .heads = 2, .kv_heads = 2, .head_dim = d};
  padded.causal = false;
  Problem full(padded, 0.0f, 21);
  full.set_padding(padding_mask(seq, 1, {len}, false, 0));
  full.run();
  AttentionShape shorter = padded;
  shorter.seq = len;
  Problem part(shorter, 0.0f, 21);
  const int64_t row = 2 * d;  // one position of [seq, 1, 2 heads, d]
  for (auto [dst, src] : {std::pair{&part.q, &full.q}, {&part.k, &full.k}, {&part.v, &full.v}, {&part.dout, &full.dout}})
    dst->assign(src->begin(), src->begin() + len * row);
  for (int64_t i = len; i < seq; ++i)  // padded queries carry no output gradient (no loss there)
    std::fill(full.dout.begin() + i * row, full.dout.begin() + (i + 1) * row, 0.0f);
  full.run();
  part.run();
  for (int64_t i = 0; i < len * row; ++i) {
    ASSERT_NEAR(full.out[i], part.out[i], 1e-5f) << i;
    ASSERT_NEAR(full.dq[i], part.dq[i], 1e-5f) << i;
    ASSERT_NEAR(full.dk[i], part.dk[i], 1e-5f) << i;
    ASSERT_NEAR(full.dv[i], part.dv[i], 1e-5f) << i;
  }
  for (int64_t i = len * row; i < seq * row; ++i) {
    ASSERT_EQ(full.dk[i], 0.0f);
    ASSERT_EQ(full.dv[i], 0.0f);
  }
}

TEST(Attention, BidirectionalBitwiseIdenticalAcrossThreadCounts) {
  AttentionShape s{.seq = 130, .batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 16};
  s.causal = false;
  Problem one(s, 0.1f, 5), two(s, 0.1f, 5);
  one.set_padding(padding_mask(130, 2, {130, 90}, false, 0));
  two.set_padding(one.valid);
  omp_set_num_threads(1);
  one.run();
  omp_set_num_threads(2);
  two.run();
  EXPECT_TRUE(same_bits(one.out, two.out));
  EXPECT_TRUE(same_bits(one.dq, two.dq));
  EXPECT_TRUE(same_bits(one.dk, two.dk));
  EXPECT_TRUE(same_bits(one.dv, two.dv));
}

TEST(Attention, RejectsBadMaskCombinations) {
  AttentionShape s{.seq = 6, .batch = 2, .heads = 2, .kv_heads = 1, .head_dim = 8};
  Problem pr(s, 0.0f, 1);
  std::vector<int32_t> mask(12, 1);
  std::fill(mask.begin() + 6, mask.end(), 0);  // sample 1 hides every key
  AttentionShape bad = s;
  bad.causal = false;
  bad.key_valid = mask.data();
  std::vector<float> out(pr.q.size()), lse(2 * 2 * 6);
  EXPECT_THROW(attention_forward(pr.q.data(), pr.k.data(), pr.v.data(), out.data(), lse.data(), bad, pr.scale, pr.drop),
               Error);
  std::vector<int32_t> doc(12, 0);
  AttentionShape both = s;
  both.causal = false;
  both.doc_start = doc.data();  // documents are causal
  EXPECT_THROW(attention_forward(pr.q.data(), pr.k.data(), pr.v.data(), out.data(), lse.data(), both, pr.scale, pr.drop),
               Error);
  AttentionShape causal_padding = s;
  causal_padding.key_valid = doc.data();
  EXPECT_THROW(attention_forward(pr.q.data(), pr.k.data(), pr.v.data(), out.data(), lse.data(), causal_padding,
                                 pr.scale, pr.drop),
               Error);
}

// A sequence cut into slices, each slice's queries against its keys so far (AttentionShape::kv_seq, as
// TeraPipe and context parallelism run attention), gives the whole sequence's outputs, log-sum-exps and
// query gradients row for row, and its key and value gradients summed over the slices; with dropout
// keyed by the whole sequence (AttentionDropout::seq), so the masks are the whole sequence's too.
TEST(Attention, SlicesAgainstTheirPrefixGiveTheWholeSequence) {
  const AttentionShape whole{.seq = 150, .batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 16};
  const std::vector<std::vector<int64_t>> slicings = {{150}, {37, 64, 49}, {1, 100, 49}, {64, 64, 22}, {70, 80}};
  for (float p : {0.0f, 0.2f}) {
    Problem full(whole, p, 21);
    full.run();
    const int64_t q_row = whole.batch * whole.heads * whole.head_dim, kv_row = whole.batch * whole.kv_heads * whole.head_dim;
    for (const std::vector<int64_t>& slices : slicings) {
      SCOPED_TRACE(::testing::Message() << "p " << p << ", " << slices.size() << " slices, the first " << slices[0]);
      std::vector<float> dk(full.dk.size(), 0.0f), dv(full.dv.size(), 0.0f);
      int64_t c = 0;
      for (int64_t l : slices) {
        AttentionShape s = whole;
        s.seq = l;
        s.kv_seq = c + l;
        AttentionDropout drop = full.drop;
        drop.seq = whole.seq;
        const float* q = full.q.data() + c * q_row;
        const float* dout = full.dout.data() + c * q_row;
        std::vector<float> out(l * q_row, NAN), lse(whole.batch * whole.heads * l, NAN), dq(l * q_row, NAN);
        std::vector<float> dk_s((c + l) * kv_row, NAN), dv_s((c + l) * kv_row, NAN);
        attention_forward(q, full.k.data(), full.v.data(), out.data(), lse.data(), s, full.scale, drop);
        attention_backward(q, full.k.data(), full.v.data(), out.data(), lse.data(), dout, dq.data(), dk_s.data(),
                           dv_s.data(), s, full.scale, drop);
        const std::vector<float> out_rows(full.out.begin() + c * q_row, full.out.begin() + (c + l) * q_row);
        const std::vector<float> dq_rows(full.dq.begin() + c * q_row, full.dq.begin() + (c + l) * q_row);
        EXPECT_LE(max_scaled_error(out, out_rows, 1e-5, 1e-5), 1.0) << "slice at " << c;
        EXPECT_LE(max_scaled_error(dq, dq_rows, 1e-5, 1e-5), 1.0) << "slice at " << c;
        for (int64_t bh = 0; bh < whole.batch * whole.heads; ++bh)
          for (int64_t r = 0; r < l; ++r)
            EXPECT_NEAR(lse[bh * l + r], full.lse[bh * whole.seq + c + r], 1e-5) << "slice at " << c << " row " << r;
        for (size_t i = 0; i < dk_s.size(); ++i) dk[i] += dk_s[i], dv[i] += dv_s[i];
        c += l;
      }
      EXPECT_LE(max_scaled_error(dk, full.dk, 1e-5, 1e-4), 1.0);
      EXPECT_LE(max_scaled_error(dv, full.dv, 1e-5, 1e-4), 1.0);
    }
  }
}

TEST(Attention, RejectsBadKeyLengths) {
  AttentionShape s{.seq = 8, .batch = 1, .heads = 2, .kv_heads = 2, .head_dim = 8, .kv_seq = 6};
  std::vector<float> buf(16 * 2 * 8), lse(16);
  EXPECT_THROW(attention_forward(buf.data(), buf.data(), buf.data(), buf.data(), lse.data(), s, 1.0f, {}), Error);
  s.kv_seq = 12;
  s.causal = false;  // more keys than queries needs causal attention
  EXPECT_THROW(attention_forward(buf.data(), buf.data(), buf.data(), buf.data(), lse.data(), s, 1.0f, {}), Error);
  s.causal = true;
  AttentionDropout drop;
  drop.p = 0.1f;
  drop.total_heads = 2;
  drop.seq = 10;  // the masks' sequence is shorter than the keys
  EXPECT_THROW(attention_forward(buf.data(), buf.data(), buf.data(), buf.data(), lse.data(), s, 1.0f, drop), Error);
}

TEST(Attention, RejectsBadShapes) {
  AttentionShape s{.seq = 4, .batch = 1, .heads = 3, .kv_heads = 2, .head_dim = 8};
  std::vector<float> buf(4 * 3 * 8), lse(12);
  EXPECT_THROW(attention_forward(buf.data(), buf.data(), buf.data(), buf.data(), lse.data(), s, 1.0f, {}),
               std::exception);
  s.kv_heads = 3;
  AttentionDropout drop;
  drop.p = 0.1f;  // total_heads left at 0
  EXPECT_THROW(attention_forward(buf.data(), buf.data(), buf.data(), buf.data(), lse.data(), s, 1.0f, drop),
               std::exception);
}

}  // namespace
}  // namespace tessera::kernels
