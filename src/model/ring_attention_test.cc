// Ring attention's block pairs and log-sum-exp merge (model/ring_attention.h) against the attention
// kernel on the whole sequence, forward and backward, with grouped-query heads and dropout: cp ranks
// are simulated in one process, each running the ring's steps (ring_step_forward / ring_step_backward)
// on the key/value chunks of every other rank in ring order, the dK/dV sums collected per owner. With
// document masks too (--reset-attention-mask): documents that start inside a chunk, at a chunk's first
// position, and queries whose document starts after a whole earlier chunk.
#include "model/ring_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/attention.h"

namespace tessera::model {
namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = normal(rng);
  return t;
}

// Rows of a rank's [2 chunk * batch, width] tensor <-> rows of the whole [seq * batch, width] tensor.
Tensor rank_rows(const Tensor& whole, const RingAttentionShape& s, int rank) {
  const int64_t width = whole.numel() / (s.sequence() * s.batch), rows = s.chunk * s.batch;
  Tensor local = Tensor::empty({2 * rows, width});
  const auto chunks = parallel::load_balanced_chunks(s.cp, rank);
  for (int c = 0; c < 2; ++c)
    std::copy_n(whole.f32() + chunks[c] * rows * width, rows * width, local.f32() + c * rows * width);
  return local;
}

void expect_rows_match(const Tensor& local, const Tensor& whole, const RingAttentionShape& s, int rank,
                       const char* what) {
  const Tensor expected = rank_rows(whole, s, rank);
  float scale = 0, worst = 0;
  for (int64_t i = 0; i < whole.numel(); ++i) scale = std::max(scale, std::abs(whole.f32()[i]));
  for (int64_t i = 0; i < local.numel(); ++i) worst = std::max(worst, std::abs(local.f32()[i] - expected.f32()[i]));
  EXPECT_LE(worst, 2e-6f * scale) << what << " of rank " << rank << " (largest " << scale << ")";
}

struct Case {
  int cp;
  int64_t chunk;
  float dropout;
  bool documents = false;
};

// [batch, seq] document starts: sample b's documents start every `3 + 2 b` positions, and at position
// `seq / 2` (the first position of chunk cp).
Tensor document_starts(int64_t batch, int64_t seq) {
  Tensor t = Tensor::empty({batch, seq}, DType::I32);
  for (int64_t b = 0; b < batch; ++b) {
    int32_t start = 0;
    for (int64_t i = 0; i < seq; ++i) {
      if (i > 0 && (i % (3 + 2 * b) == 0 || i == seq / 2)) start = static_cast<int32_t>(i);
      t.i32()[b * seq + i] = start;
    }
  }
  return t;
}

// A rank's [batch, 2 chunk] columns of a [batch, seq] tensor.
Tensor rank_columns(const Tensor& whole, const RingAttentionShape& s, int rank) {
  const int64_t seq = s.sequence();
  Tensor local = Tensor::empty({s.batch, 2 * s.chunk}, DType::I32);
  const auto chunks = parallel::load_balanced_chunks(s.cp, rank);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int c = 0; c < 2; ++c)
      std::copy_n(whole.i32() + b * seq + chunks[c] * s.chunk, s.chunk, local.i32() + b * 2 * s.chunk + c * s.chunk);
  return local;
}

class RingAttention : public ::testing::TestWithParam<Case> {};

TEST_P(RingAttention, MergedBlocksGiveTheWholeSequencesAttentionAndGradients) {
  const Case c = GetParam();
  const RingAttentionShape s{c.chunk, 2, 4, 2, 8, c.cp};
  const int64_t seq = s.sequence(), rows = seq * s.batch;
  const float scale = 1.0f / std::sqrt(8.0f);
  kernels::AttentionDropout drop;
  drop.p = c.dropout;
  drop.seed = 7;
  drop.stream = 3;
  drop.sample_offset = 5;
  drop.head_offset = 4;
  drop.total_heads = 12;
  const Tensor q = random_tensor({rows, s.heads, s.head_dim}, 1), k = random_tensor({rows, s.kv_heads, s.head_dim}, 2);
  const Tensor v = random_tensor({rows, s.kv_heads, s.head_dim}, 3);
  const Tensor dout = random_tensor({rows, s.heads * s.head_dim}, 4);
  const Tensor docs = c.documents ? document_starts(s.batch, seq) : Tensor();

  // The whole sequence at once, its dropout keyed by the same sequence.
  kernels::AttentionShape whole{seq, s.batch, s.heads, s.kv_heads, s.head_dim};
  kernels::AttentionDropout whole_drop = drop;
  whole_drop.seq = seq;
  const Tensor out = Tensor::empty({rows, s.heads * s.head_dim}), lse = Tensor::empty({s.batch, s.heads, seq});
  kernels::attention_forward(q, k, v, out, lse, docs, whole, scale, whole_drop);
  const Tensor dq = Tensor::empty(q.shape()), dk = Tensor::empty(k.shape()), dv = Tensor::empty(v.shape());
  kernels::attention_backward(q, k, v, out, lse, dout, dq, dk, dv, docs, whole, scale, whole_drop);

  std::vector<Tensor> local_q, local_k, local_v, local_out, local_lse, local_dout, local_dq, local_dk, local_dv;
  std::vector<Tensor> local_docs;
  for (int r = 0; r < c.cp; ++r) {
    local_docs.push_back(c.documents ? rank_columns(docs, s, r) : Tensor());
    local_q.push_back(rank_rows(q, s, r));
    local_k.push_back(rank_rows(k, s, r));
    local_v.push_back(rank_rows(v, s, r));
    local_dout.push_back(rank_rows(dout, s, r));
    local_out.push_back(Tensor::empty({2 * s.chunk * s.batch, s.heads * s.head_dim}));
    local_lse.push_back(Tensor::empty({2, s.batch, s.heads, s.chunk}));
    local_dq.push_back(Tensor::zeros(local_q.back().shape()));
    local_dk.push_back(Tensor::zeros(local_k.back().shape()));
    local_dv.push_back(Tensor::zeros(local_v.back().shape()));
  }
  for (int r = 0; r < c.cp; ++r)
    for (int step = 0; step < c.cp; ++step) {  // the ring's order: own block first
      const int source = (r - step + c.cp) % c.cp;
      ring_step_forward(s, r, source, local_q[r], local_k[source], local_v[source], local_out[r], local_lse[r], scale,
                        drop, local_docs[r]);
    }
  for (int r = 0; r < c.cp; ++r) {
    expect_rows_match(local_out[r], out, s, r, "output");
    for (int step = 0; step < c.cp; ++step) {
      const int source = (r - step + c.cp) % c.cp;
      ring_step_backward(s, r, source, local_q[r], local_k[source], local_v[source], local_out[r], local_lse[r],
                         local_dout[r], local_dq[r], local_dk[source], local_dv[source], scale, drop, local_docs[r]);
    }
  }
  for (int r = 0; r < c.cp; ++r) {
    expect_rows_match(local_dq[r], dq, s, r, "dQ");
    expect_rows_match(local_dk[r], dk, s, r, "dK");
    expect_rows_match(local_dv[r], dv, s, r, "dV");
  }
}

// Chunks of 5 (not a multiple of the kernel's 64-row tile) and of 70 (two tiles, the second partial);
// document masks at cp 2 and 4, and over two tiles.
INSTANTIATE_TEST_SUITE_P(Layouts, RingAttention,
                         ::testing::Values(Case{1, 5, 0.0f}, Case{2, 5, 0.0f}, Case{2, 5, 0.2f}, Case{4, 3, 0.2f},
                                           Case{2, 70, 0.1f}, Case{2, 5, 0.0f, true}, Case{4, 3, 0.2f, true},
                                           Case{2, 70, 0.1f, true}));

}  // namespace
}  // namespace tessera::model
