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
    const Reference ref = expect_reference_gradients_match_differences(pr);
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
