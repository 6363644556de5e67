// The batched-GEMM attention (kernels/gemm_attention.h) on the CPU's row ops against the float64
// reference (kernels/attention_testing.h) and the tiled CPU kernel (kernels/cpu/attention.h): out, lse,
// dq, dk, dv for causal attention (MHA, GQA, MQA), document masks, bidirectional attention with padding
// or first keys, more keys than queries with dropout offsets, dropout on and off, head dims 16, 64 and
// 128, sequences that are not multiples of any tile; chunked launches against one launch; bf16 GEMM
// inputs within bf16's tolerance. The CUDA row ops are compared with these in
// kernels/cuda/cuda_attention_gemm_test.cc.
#include "kernels/gemm_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/testing.h"
#include "kernels/attention_testing.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm_attention_rows.h"

namespace tessera::kernels {
namespace {

using namespace attention_testing;
using gemm_attention::GemmAttentionOptions;

struct Results {
  std::vector<float> out, lse, dq, dk, dv;
};

// Forward then backward (from its own out and lse) through the batched GEMMs, every output starting NaN.
Results run_gemm(const AttentionShape& s, const AttentionDropout& drop, float scale, const std::vector<float>& q,
                 const std::vector<float>& k, const std::vector<float>& v, const std::vector<float>& dout,
                 const GemmAttentionOptions& options = {}) {
  Results r;
  r.out.assign(q.size(), NAN);
  r.lse.assign(s.batch * s.heads * s.seq, NAN);
  r.dq.assign(q.size(), NAN);
  r.dk.assign(k.size(), NAN);
  r.dv.assign(v.size(), NAN);
  gemm_attention::RowOps& ops = cpu::gemm_attention_row_ops();
  gemm_attention::forward(ops, q.data(), k.data(), v.data(), r.out.data(), r.lse.data(), s, scale, drop, options);
  gemm_attention::backward(ops, q.data(), k.data(), v.data(), r.lse.data(), dout.data(), r.dq.data(), r.dk.data(),
                           r.dv.data(), s, scale, drop, options);
  return r;
}

// The results against another run's, each element within atol + rtol |want| (-inf lse rows equal).
void expect_close(const Results& got, const Results& want, double atol, double rtol, const char* what) {
  SCOPED_TRACE(what);
  const auto err = [&](const std::vector<float>& a, const std::vector<float>& b) {
    for (size_t i = 0; i < a.size(); ++i)
      if (std::isinf(b[i]) || std::isnan(a[i])) {
        EXPECT_EQ(a[i], b[i]) << "element " << i;
      }
    return max_scaled_error(a, b, atol, rtol);
  };
  EXPECT_LE(err(got.out, want.out), 1.0) << "out";
  EXPECT_LE(err(got.lse, want.lse), 1.0) << "lse";
  EXPECT_LE(err(got.dq, want.dq), 1.0) << "dq";
  EXPECT_LE(err(got.dk, want.dk), 1.0) << "dk";
  EXPECT_LE(err(got.dv, want.dv), 1.0) << "dv";
}

// One problem through the batched GEMMs, against the float64 reference (as the tiled kernel is held to,
// kernels/attention_test.cc) and against the tiled kernel; `mask` as expect_matches_reference's.
void expect_matches(const AttentionShape& shape, float p, uint64_t seed, const std::vector<int32_t>& mask = {}) {
  SCOPED_TRACE(::testing::Message() << (shape.causal ? "causal" : "bidirectional") << " seq " << shape.seq
                                    << " heads " << shape.heads << "/" << shape.kv_heads << " d " << shape.head_dim
                                    << " p " << p << (mask.empty() ? "" : " with a mask"));
  Problem pr(shape, p, seed);
  const bool docs = shape.causal || shape.bidirectional_doc_start;
  if (!mask.empty() && docs) pr.set_docs(mask);
  if (!mask.empty() && !docs) pr.set_padding(mask);
  pr.run();  // the tiled CPU kernel
  const Results tiled{pr.out, pr.lse, pr.dq, pr.dk, pr.dv};
  const Results got = run_gemm(pr.shape, pr.drop, pr.scale, pr.q, pr.k, pr.v, pr.dout);

  const auto q = to_double(pr.q), k = to_double(pr.k), v = to_double(pr.v);
  Reference ref = reference_forward(q, k, v, pr.shape, pr.scale, pr.drop);
  reference_backward(q, k, v, to_double(pr.dout), pr.shape, pr.scale, pr.drop, ref);
  EXPECT_LE(max_scaled_error(got.out, ref.out, 1e-5, 1e-5), 1.0) << "out";
  EXPECT_LE(max_scaled_error(got.lse, ref.lse, 1e-5, 1e-5), 1.0) << "lse";
  EXPECT_LE(max_scaled_error(got.dq, ref.dq, 1e-5, 1e-5), 1.0) << "dq";
  EXPECT_LE(max_scaled_error(got.dk, ref.dk, 1e-5, 1e-5), 1.0) << "dk";
  EXPECT_LE(max_scaled_error(got.dv, ref.dv, 1e-5, 1e-5), 1.0) << "dv";
  expect_close(got, tiled, 2e-5, 2e-5, "against the tiled kernel");
}

// doc_start of a [batch, seq] mask from each sample's document starts (each list beginning with 0).
std::vector<int32_t> doc_starts(int64_t seq, const std::vector<std::vector<int32_t>>& starts) {
  std::vector<int32_t> m;
  for (const auto& st : starts)
    for (int64_t i = 0; i < seq; ++i) {
      int32_t first = 0;
      for (int32_t x : st)
        if (x <= i) first = x;
      m.push_back(first);
    }
  return m;
}

TEST(GemmAttention, CausalMatchesTheReferenceAndTheTiledKernel) {
  const int64_t seqs[] = {1, 7, 67, 130};
  const int64_t kv_heads[] = {4, 2, 1};  // MHA, GQA, MQA
  const int64_t dims[] = {16, 64, 128};  // each seq meets every head_dim across the kv_heads
  for (int si = 0; si < 4; ++si)
    for (int ki = 0; ki < 3; ++ki)
      for (float p : {0.0f, 0.1f})
        expect_matches({.seq = seqs[si], .batch = 2, .heads = 4, .kv_heads = kv_heads[ki],
                        .head_dim = dims[(si + ki) % 3]},
                       p, 100 * si + 10 * ki + (p > 0));
}

TEST(GemmAttention, DocumentMaskMatches) {
  for (float p : {0.0f, 0.1f})
    expect_matches({.seq = 130, .batch = 3, .heads = 4, .kv_heads = 2, .head_dim = 64}, p, 21,
                   doc_starts(130, {{0, 5, 6, 40, 100}, {0, 64, 127}, {0}}));
  expect_matches({.seq = 67, .batch = 2, .heads = 2, .kv_heads = 1, .head_dim = 128}, 0.1f, 22,
                 doc_starts(67, {{0, 20}, {0, 66}}));
}

TEST(GemmAttention, BidirectionalMatches) {
  for (float p : {0.0f, 0.1f}) {
    AttentionShape s{.seq = 67, .batch = 3, .heads = 4, .kv_heads = 1, .head_dim = 16};
    s.causal = false;
    expect_matches(s, p, 31);
    std::vector<int32_t> valid(3 * 67, 1);
    for (int64_t j = 50; j < 67; ++j) valid[j] = 0;               // sample 0: padding after 50
    for (int64_t j = 0; j < 67; ++j) valid[67 + j] = j % 7 != 3;  // sample 1: holes
    for (int64_t j = 0; j < 67; ++j) valid[134 + j] = j == 40;    // sample 2: one key
    expect_matches(s, p, 32, valid);
    // First keys rising through the sequence, the last rows past every key (out 0, lse -inf).
    AttentionShape f{.seq = 45, .batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 64};
    f.causal = false;
    f.bidirectional_doc_start = true;
    std::vector<int32_t> first(2 * 45, 0);
    for (int64_t i = 0; i < 45; ++i) first[i] = static_cast<int32_t>(i < 10 ? 0 : i < 40 ? i - 5 : 45);
    expect_matches(f, p, 41, first);
  }
}

// A slice of queries against more keys, dropout keyed by a longer sequence at offsets: against the tiled
// kernel (the float64 reference takes as many keys as queries).
TEST(GemmAttention, MoreKeysThanQueriesMatchesTheTiledKernel) {
  for (float p : {0.0f, 0.1f}) {
    const AttentionShape s{.seq = 37, .batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 64, .kv_seq = 100};
    AttentionDropout drop{.p = p, .seed = 1234, .stream = 77, .sample_offset = 3, .head_offset = 2,
                          .total_heads = 8, .seq = 150, .query_offset = 10, .key_offset = 40};
    const float scale = 0.125f;
    const auto q = testing::random_vector(37 * 2 * 4 * 64, 5, -2.0f, 2.0f);
    const auto k = testing::random_vector(100 * 2 * 2 * 64, 6, -2.0f, 2.0f);
    const auto v = testing::random_vector(100 * 2 * 2 * 64, 7), dout = testing::random_vector(q.size(), 8);
    Results tiled{std::vector<float>(q.size()), std::vector<float>(2 * 4 * 37), std::vector<float>(q.size()),
                  std::vector<float>(k.size()), std::vector<float>(v.size())};
    cpu::attention_forward(q.data(), k.data(), v.data(), tiled.out.data(), tiled.lse.data(), s, scale, drop);
    cpu::attention_backward(q.data(), k.data(), v.data(), tiled.out.data(), tiled.lse.data(), dout.data(),
                            tiled.dq.data(), tiled.dk.data(), tiled.dv.data(), s, scale, drop);
    expect_close(run_gemm(s, drop, scale, q, k, v, dout), tiled, 2e-5, 2e-5, p > 0 ? "p 0.1" : "p 0");
  }
}

// One sample per launch (scores under a byte limit) gives the same bits as the whole batch in one: the
// chunks' GEMMs and rows are the same computations.
TEST(GemmAttention, ChunkedLaunchesEqualOneLaunch) {
  Problem pr({.seq = 67, .batch = 3, .heads = 4, .kv_heads = 2, .head_dim = 16}, 0.1f, 61);
  pr.set_docs(doc_starts(67, {{0, 30}, {0}, {0, 1, 2}}));
  const Results whole = run_gemm(pr.shape, pr.drop, pr.scale, pr.q, pr.k, pr.v, pr.dout);
  const Results chunked =
      run_gemm(pr.shape, pr.drop, pr.scale, pr.q, pr.k, pr.v, pr.dout, {.max_scores_bytes = 1});
  EXPECT_TRUE(same_bits(whole.out, chunked.out));
  EXPECT_TRUE(same_bits(whole.lse, chunked.lse));
  EXPECT_TRUE(same_bits(whole.dq, chunked.dq));
  EXPECT_TRUE(same_bits(whole.dk, chunked.dk));
  EXPECT_TRUE(same_bits(whole.dv, chunked.dv));
}

// bf16 GEMM inputs (what the GPU's tensor cores take): within bf16's rounding of the float64 reference,
// and far outside fp32's (so the option does reach the GEMMs).
TEST(GemmAttention, Bf16GemmInputsStayWithinBf16Rounding) {
  Problem pr({.seq = 130, .batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 64}, 0.1f, 71);
  const Results got =
      run_gemm(pr.shape, pr.drop, pr.scale, pr.q, pr.k, pr.v, pr.dout, {.gemm_input = DType::BF16});
  const auto q = to_double(pr.q), k = to_double(pr.k), v = to_double(pr.v);
  Reference ref = reference_forward(q, k, v, pr.shape, pr.scale, pr.drop);
  reference_backward(q, k, v, to_double(pr.dout), pr.shape, pr.scale, pr.drop, ref);
  for (auto [name, a, b] : {std::tuple{"out", &got.out, &ref.out}, std::tuple{"dq", &got.dq, &ref.dq},
                            std::tuple{"dk", &got.dk, &ref.dk}, std::tuple{"dv", &got.dv, &ref.dv}}) {
    EXPECT_LE(max_scaled_error(*a, *b, 3e-2, 3e-2), 1.0) << name;
    EXPECT_GT(max_scaled_error(*a, *b, 1e-5, 1e-5), 1.0) << name << " looks unrounded";
  }
}

TEST(GemmAttention, RejectsBadShapes) {
  const std::vector<float> x(8 * 2 * 8, 0.5f);
  std::vector<float> out(x.size()), lse(2 * 8);
  gemm_attention::RowOps& ops = cpu::gemm_attention_row_ops();
  const AttentionDropout none;
  const auto run = [&](const AttentionShape& s) {
    gemm_attention::forward(ops, x.data(), x.data(), x.data(), out.data(), lse.data(), s, 0.3f, none);
  };
  EXPECT_THROW(run({.seq = 8, .batch = 1, .heads = 2, .kv_heads = 3, .head_dim = 8}), Error);  // heads % kv_heads
  EXPECT_THROW(run({.seq = 8, .batch = 1, .heads = 2, .kv_heads = 2, .head_dim = 8, .kv_seq = 6}), Error);
  EXPECT_THROW(run({.seq = 0, .batch = 1, .heads = 2, .kv_heads = 2, .head_dim = 8}), Error);
}

}  // namespace
}  // namespace tessera::kernels
