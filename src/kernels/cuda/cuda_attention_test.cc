// The CUDA attention (kernels/cuda/attention.cu, attention_merge.cu) through the tensor entry points, on
// tensors on cuda:0, against the CPU kernels on the same random inputs: out, lse, dq, dk, dv for each
// option (causal, more keys than queries with dropout offsets, token slices at offsets in a longer
// sequence, document mask, bidirectional with and without padding, bidirectional_doc_start with rows
// that see no key, GQA and MQA, dropout), over sizes
// that are not multiples of the 32-key tile or the 8-row block, head dims 16, 24, 64, 128 (the tiled kernels) and
// 160 (the row-per-warp kernels they fall back to); backward determinism; the masks'
// checks; block_doc_start and attention_merge_into. Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"
#include "kernels/attention.h"
#include "kernels/attention_merge.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/tensor_ops.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using kernels::AttentionDropout;
using kernels::AttentionShape;
// Every case with each kernel set (cuda/attention.h): the row-per-warp ones, the tiled ones and the
// batched-GEMM ones with fp32 products (cuda/attention_gemm.h; its bf16 products are
// cuda_attention_gemm_test.cc's).
class CudaAttention : public CudaKernelTest, public ::testing::WithParamInterface<kernels::cuda::AttentionKernels> {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    kernels::cuda::set_attention_kernels(GetParam());
  }
};

// The CPU kernel meets a float64 reference within 1e-5 (kernels/attention_test.cc); the GPU sums the same
// terms in another order (per-lane running statistics, lse-normalised weights), so the two may differ by
// about twice that. A wrong mask, key or dropout bit gives errors orders of magnitude larger.
constexpr float kTol = 2e-5f;
constexpr float kForwardAtol = 2e-5f, kGradAtol = 5e-5f;

struct Case {
  std::string name;
  AttentionShape shape;  // the masks' pointers null: the mask is passed as a tensor
  AttentionDropout drop;
  std::vector<int32_t> mask;  // [batch, seq] or empty
};

Tensor nans(const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  std::fill(t.f32(), t.f32() + t.numel(), NAN);
  return t;
}

Tensor device_or_undefined(const Tensor& host) { return host.defined() ? to_device(host) : Tensor(); }

struct Inputs {
  Shape q_shape, kv_shape, lse_shape;
  Tensor q, k, v, dout, mask;
  float scale;
};

Inputs inputs(const Case& c, uint64_t seed) {
  const AttentionShape& s = c.shape;
  const int64_t kv_seq = s.kv_seq > 0 ? s.kv_seq : s.seq;
  Inputs in;
  in.q_shape = {s.seq, s.batch, s.heads, s.head_dim};
  in.kv_shape = {kv_seq, s.batch, s.kv_heads, s.head_dim};
  in.lse_shape = {s.batch, s.heads, s.seq};
  in.q = random(in.q_shape, seed, -2.0f, 2.0f);  // wide enough that the softmax is far from uniform
  in.k = random(in.kv_shape, seed + 1, -2.0f, 2.0f);
  in.v = random(in.kv_shape, seed + 2);
  in.dout = random(in.q_shape, seed + 3);
  if (!c.mask.empty()) in.mask = kernels::from_host(c.mask);
  in.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  return in;
}

// Forward and backward on the GPU and on the CPU from the same inputs, all five results compared. The
// GPU's outputs start as NaN, so every element must be written. Backward runs from the CPU's out and
// lse on both, so that it is compared by itself.
void expect_matches_cpu(const Case& c, uint64_t seed) {
  SCOPED_TRACE(c.name);
  const Inputs in = inputs(c, seed);
  const Tensor q = to_device(in.q), k = to_device(in.k), v = to_device(in.v), dout = to_device(in.dout);
  const Tensor mask = device_or_undefined(in.mask);

  Tensor out = Tensor::empty(in.q_shape), lse = Tensor::empty(in.lse_shape);
  kernels::attention_forward(in.q, in.k, in.v, out, lse, in.mask, c.shape, in.scale, c.drop);
  Tensor out_gpu = to_device(nans(in.q_shape)), lse_gpu = to_device(nans(in.lse_shape));
  kernels::attention_forward(q, k, v, out_gpu, lse_gpu, mask, c.shape, in.scale, c.drop);
  EXPECT_TRUE(all_close(to_host(out_gpu), out, kTol, kForwardAtol)) << "out";
  EXPECT_TRUE(all_close(to_host(lse_gpu), lse, kTol, kForwardAtol)) << "lse";

  Tensor dq = Tensor::empty(in.q_shape), dk = Tensor::empty(in.kv_shape), dv = Tensor::empty(in.kv_shape);
  kernels::attention_backward(in.q, in.k, in.v, out, lse, in.dout, dq, dk, dv, in.mask, c.shape, in.scale, c.drop);
  Tensor dq_gpu = to_device(nans(in.q_shape)), dk_gpu = to_device(nans(in.kv_shape));
  Tensor dv_gpu = to_device(nans(in.kv_shape));
  kernels::attention_backward(q, k, v, to_device(out), to_device(lse), dout, dq_gpu, dk_gpu, dv_gpu, mask, c.shape,
                              in.scale, c.drop);
  EXPECT_TRUE(all_close(to_host(dq_gpu), dq, kTol, kGradAtol)) << "dq";
  EXPECT_TRUE(all_close(to_host(dk_gpu), dk, kTol, kGradAtol)) << "dk";
  EXPECT_TRUE(all_close(to_host(dv_gpu), dv, kTol, kGradAtol)) << "dv";
}

AttentionDropout dropout(const AttentionShape& s, float p) {
  AttentionDropout d;
  d.p = p;
  d.seed = 1234;
  d.stream = 77;
  d.total_heads = s.heads;
  return d;
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

std::string label(const AttentionShape& s, float p) {
  return "seq " + std::to_string(s.seq) + " kv_seq " + std::to_string(s.kv_seq) + " batch " +
         std::to_string(s.batch) + " heads " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " d " +
         std::to_string(s.head_dim) + " p " + std::to_string(p);
}

// Plain causal attention: MHA, GQA and MQA, with and without dropout, around and across the 32-key tile.
TEST_P(CudaAttention, CausalMatchesTheCpu) {
  const int64_t seqs[] = {1, 7, 33, 67, 130};
  const int64_t kv_heads[] = {4, 2, 1};
  const int64_t dims[] = {16, 64, 24};
  for (int si = 0; si < 5; ++si)
    for (int ki = 0; ki < 3; ++ki)
      for (float p : {0.0f, 0.1f}) {
        const AttentionShape s{.seq = seqs[si], .batch = 2, .heads = 4, .kv_heads = kv_heads[ki],
                               .head_dim = dims[(si + ki) % 3]};
        expect_matches_cpu({label(s, p), s, dropout(s, p), {}}, 100 * si + 10 * ki + (p > 0));
      }
}

// More keys than queries (a slice against its prefix), dropout keyed by a longer sequence with the
// queries and keys at offsets in it.
TEST_P(CudaAttention, MoreKeysThanQueriesMatchesTheCpu) {
  for (int64_t d : {16, 24}) {
    for (float p : {0.0f, 0.1f}) {
      const AttentionShape s{.seq = 37, .batch = 2, .heads = 4, .kv_heads = 2, .head_dim = d, .kv_seq = 100};
      AttentionDropout drop = dropout(s, p);
      expect_matches_cpu({label(s, p), s, drop, {}}, 7 + d);
      drop.seq = 150;
      drop.query_offset = 10;
      drop.key_offset = 40;
      drop.sample_offset = 3;
      drop.head_offset = 2;
      drop.total_heads = 8;
      expect_matches_cpu({label(s, p) + " at offsets", s, drop, {}}, 8 + d);
    }
  }
}

// TeraPipe's token slices (model/token_slice_attention.h): a sequence of 130 cut into slices of 13, 32, 45
// and 40, each slice's queries against the keys of every position up to its end (kv_seq = offset + seq,
// the first slice's kv_seq its own seq), causal with that offset, dropout keyed by the whole sequence
// (seq 130, no key or query offset). MHA and GQA; head dims 24 and 64 (tiled) and 160 (the row-per-warp
// kernels the tiled ones fall back to).
TEST_P(CudaAttention, TokenSlicesOfASequenceMatchTheCpu) {
  const int64_t total = 130;
  int64_t offset = 0, n = 0;
  for (int64_t length : {13, 32, 45, 40}) {
    for (float p : {0.0f, 0.1f}) {
      const int64_t kv_heads = n % 2 == 0 ? 4 : 2, d = n % 3 == 0 ? 24 : n % 3 == 1 ? 64 : 160;
      const AttentionShape s{.seq = length, .batch = 2, .heads = 4, .kv_heads = kv_heads, .head_dim = d,
                             .kv_seq = offset + length};
      AttentionDropout drop = dropout(s, p);
      drop.seq = total;
      expect_matches_cpu({label(s, p) + " slice at " + std::to_string(offset) + " of " + std::to_string(total), s,
                          drop, {}},
                         300 + n);
      ++n;
    }
    offset += length;
  }
  EXPECT_EQ(offset, total);
}

// Document-causal: boundaries inside and on the 32-key tiles, a one-token document, a sample of one document.
TEST_P(CudaAttention, DocumentMaskMatchesTheCpu) {
  for (float p : {0.0f, 0.1f}) {
    const AttentionShape s{.seq = 130, .batch = 3, .heads = 4, .kv_heads = 2, .head_dim = 24};
    const auto mask = doc_starts(130, {{0, 5, 6, 40, 100}, {0, 32, 64, 127}, {0}});
    expect_matches_cpu({label(s, p) + " documents", s, dropout(s, p), mask}, 21);
  }
  const AttentionShape s{.seq = 67, .batch = 2, .heads = 2, .kv_heads = 2, .head_dim = 64};
  expect_matches_cpu({label(s, 0) + " documents", s, dropout(s, 0), doc_starts(67, {{0, 20}, {0, 66}})}, 22);
}

// Bidirectional without padding and with it: a padded tail, padded keys in the middle, one valid key.
TEST_P(CudaAttention, BidirectionalMatchesTheCpu) {
  for (float p : {0.0f, 0.1f}) {
    AttentionShape s{.seq = 67, .batch = 3, .heads = 4, .kv_heads = 1, .head_dim = 16};
    s.causal = false;
    expect_matches_cpu({label(s, p) + " bidirectional", s, dropout(s, p), {}}, 31);
    std::vector<int32_t> valid(3 * 67, 1);
    for (int64_t j = 50; j < 67; ++j) valid[j] = 0;                // sample 0: padding after 50
    for (int64_t j = 0; j < 67; ++j) valid[67 + j] = j % 7 != 3;   // sample 1: holes
    for (int64_t j = 0; j < 67; ++j) valid[134 + j] = j == 40;     // sample 2: one key
    expect_matches_cpu({label(s, p) + " bidirectional padded", s, dropout(s, p), valid}, 32);
  }
}

// bidirectional_doc_start: first keys rising through the sequence, the last rows past every key (output
// 0, lse -inf, no gradient), a sample that sees everything.
TEST_P(CudaAttention, BidirectionalDocStartMatchesTheCpu) {
  for (float p : {0.0f, 0.1f}) {
    AttentionShape s{.seq = 45, .batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 24};
    s.causal = false;
    s.bidirectional_doc_start = true;
    std::vector<int32_t> first(2 * 45, 0);
    for (int64_t i = 0; i < 45; ++i) first[i] = static_cast<int32_t>(i < 10 ? 0 : i < 40 ? i - 5 : 45);
    expect_matches_cpu({label(s, p) + " bidirectional_doc_start", s, dropout(s, p), first}, 41);
  }
}

// Long rows: many key tiles per block of query rows (and query tiles per block of key rows), head_dim 128
// (the widest the tiled kernels take), GQA, dropout, documents; head_dim 160 takes the row-per-warp kernels.
TEST_P(CudaAttention, LongRowsAndWideHeadsMatchTheCpu) {
  for (float p : {0.0f, 0.1f}) {
    const AttentionShape s{.seq = 300, .batch = 1, .heads = 4, .kv_heads = 2, .head_dim = 128};
    expect_matches_cpu({label(s, p), s, dropout(s, p), {}}, 81 + (p > 0));
  }
  const AttentionShape docs{.seq = 300, .batch = 2, .heads = 2, .kv_heads = 2, .head_dim = 64};
  expect_matches_cpu({label(docs, 0) + " documents", docs, dropout(docs, 0), doc_starts(300, {{0, 37, 200}, {0, 150}})},
                     83);
  const AttentionShape wide{.seq = 45, .batch = 2, .heads = 2, .kv_heads = 1, .head_dim = 160};
  expect_matches_cpu({label(wide, 0.1f), wide, dropout(wide, 0.1f), {}}, 84);
}

// Backward writes each gradient row from one warp in a fixed order: the same inputs give the same bits.
TEST_P(CudaAttention, BackwardIsDeterministic) {
  const AttentionShape s{.seq = 130, .batch = 2, .heads = 4, .kv_heads = 1, .head_dim = 24};
  const Case c{"deterministic", s, dropout(s, 0.1f), doc_starts(130, {{0, 70}, {0, 3}})};
  const Inputs in = inputs(c, 51);
  const Tensor q = to_device(in.q), k = to_device(in.k), v = to_device(in.v), dout = to_device(in.dout);
  const Tensor mask = to_device(in.mask);
  Tensor out = to_device(nans(in.q_shape)), lse = to_device(nans(in.lse_shape));
  kernels::attention_forward(q, k, v, out, lse, mask, s, in.scale, c.drop);
  Tensor first[3];
  for (int run = 0; run < 3; ++run) {
    Tensor dq = to_device(nans(in.q_shape)), dk = to_device(nans(in.kv_shape)), dv = to_device(nans(in.kv_shape));
    kernels::attention_backward(q, k, v, out, lse, dout, dq, dk, dv, mask, s, in.scale, c.drop);
    const Tensor got[3] = {to_host(dq), to_host(dk), to_host(dv)};
    for (int t = 0; t < 3; ++t) {
      if (run == 0) first[t] = got[t];
      EXPECT_TRUE(same_bits(got[t], first[t])) << "run " << run << " gradient " << t;
    }
  }
}

// The masks live on the GPU; they are checked as the CPU checks them, with an Error.
TEST_P(CudaAttention, RejectsBadMasks) {
  AttentionShape s{.seq = 8, .batch = 1, .heads = 2, .kv_heads = 2, .head_dim = 16};
  const Tensor q = to_device(random({8, 1, 2, 16}, 61)), lse = to_device(nans({1, 2, 8}));
  Tensor out = to_device(nans({8, 1, 2, 16}));
  const AttentionDropout none;
  const auto run = [&](const AttentionShape& shape, const std::vector<int32_t>& m) {
    kernels::attention_forward(q, q, q, out, lse, to_device(kernels::from_host(m)), shape, 0.25f, none);
  };
  EXPECT_THROW(run(s, {0, 1, 1, 0, 0, 0, 0, 0}), Error);  // decreasing
  EXPECT_THROW(run(s, {0, 0, 3, 3, 3, 3, 3, 3}), Error);  // past its own position
  s.causal = false;
  EXPECT_THROW(run(s, {0, 0, 0, 0, 0, 0, 0, 0}), Error);  // padding hides every key
  s.bidirectional_doc_start = true;
  EXPECT_THROW(run(s, {0, 0, 0, 0, 0, 0, 0, 9}), Error);  // past seq
  EXPECT_NO_THROW(run(s, {0, 0, 0, 0, 0, 0, 0, 8}));      // seq: a row that sees no key
}

TEST_P(CudaAttention, BlockDocStartMatchesTheCpu) {
  const Tensor doc = kernels::from_host(doc_starts(20, {{0, 3, 9, 15}, {0}, {0, 11}}));
  Tensor doc2d = Tensor::empty({3, 20}, DType::I32);
  std::copy(doc.i32(), doc.i32() + 60, doc2d.i32());
  for (int64_t first_key : {0, 6, 12, 30}) {
    Tensor want = Tensor::empty({3, 8}, DType::I32);
    kernels::block_doc_start(doc2d, 4, first_key, want);
    Tensor got = to_device(Tensor::zeros({3, 8}, DType::I32));
    kernels::block_doc_start(to_device(doc2d), 4, first_key, got);
    EXPECT_TRUE(same_bits(to_host(got), want)) << "first_key " << first_key;
  }
}

// Merging partial results, including rows one block (or neither) has no key for (lse -inf).
TEST_P(CudaAttention, MergeMatchesTheCpu) {
  const int64_t seq = 19, batch = 2, heads = 3, d = 24;
  Tensor out = random({seq, batch, heads, d}, 71), part = random({seq, batch, heads, d}, 72);
  Tensor lse = random({batch, heads, seq}, 73, -3.0f, 6.0f), part_lse = random({batch, heads, seq}, 74, -3.0f, 6.0f);
  for (int64_t r = 0; r < batch * heads * seq; r += 5) lse.f32()[r] = -INFINITY;
  for (int64_t r = 0; r < batch * heads * seq; r += 3) part_lse.f32()[r] = -INFINITY;
  Tensor out_gpu = to_device(out), lse_gpu = to_device(lse);
  kernels::attention_merge_into(out_gpu, lse_gpu, to_device(part), to_device(part_lse), seq, batch, heads, d);
  kernels::attention_merge_into(out, lse, part, part_lse, seq, batch, heads, d);
  EXPECT_TRUE(all_close(to_host(out_gpu), out, kTol, 1e-6f)) << "out";
  EXPECT_TRUE(all_close(to_host(lse_gpu), lse, kTol, 1e-6f)) << "lse";
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaAttention,
                         ::testing::Values(kernels::cuda::AttentionKernels::kRowPerWarp,
                                           kernels::cuda::AttentionKernels::kTiled,
                                           kernels::cuda::AttentionKernels::kBatchedGemm),
                         [](const auto& info) {
                           using K = kernels::cuda::AttentionKernels;
                           return info.param == K::kTiled ? "tiled" : info.param == K::kRowPerWarp ? "rows" : "gemm";
                         });

}  // namespace
}  // namespace tessera::cuda
