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
#include "kernels/attention_testing.h"

namespace tessera::kernels {
namespace {

using namespace attention_testing;

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
      const Reference ref = expect_reference_gradients_match_differences(pr);
    }
  }
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
      const Reference ref = expect_reference_gradients_match_differences(pr);
      // And the mask matters: the masked reference differs from the plain causal one.
      AttentionShape plain = s;
      Reference causal = reference_forward(to_double(pr.q), to_double(pr.k), to_double(pr.v), plain, pr.scale, pr.drop);
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

}  // namespace
}  // namespace tessera::kernels
