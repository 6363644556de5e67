// The batched-GEMM attention's orchestration (kernels/gemm_attention.h): the GEMMs' operand views and the
// launches, the same on every device.
#include "kernels/gemm_attention.h"

#include <algorithm>

#include "core/check.h"

namespace tessera::kernels::gemm_attention {
namespace {

// The call's rows with the shape checked (kernels/cpu/attention.cc's Plan makes the same checks, and the
// masks' besides); first_sample, samples and member are set per launch.
ScoreRows checked_rows(const AttentionShape& s, float scale, const AttentionDropout& drop) {
  ScoreRows r;
  r.seq = s.seq;
  r.batch = s.batch;
  r.heads = s.heads;
  r.kv_heads = s.kv_heads;
  TESSERA_CHECK(r.seq > 0 && r.batch > 0, "batched-GEMM attention: seq ", r.seq, " and batch ", r.batch,
                " must be positive");
  r.kv_seq = s.kv_seq > 0 ? s.kv_seq : r.seq;
  r.offset = r.kv_seq - r.seq;
  TESSERA_CHECK(r.offset >= 0, "attention: kv_seq ", r.kv_seq, " is shorter than the ", r.seq, " queries");
  TESSERA_CHECK(r.offset == 0 || (s.causal && s.doc_start == nullptr), "attention: kv_seq ", r.kv_seq, " != seq ",
                r.seq, " needs causal attention without a document mask");
  TESSERA_CHECK(r.heads > 0 && r.kv_heads > 0 && r.heads % r.kv_heads == 0, "attention: heads ", r.heads,
                " must be a positive multiple of kv_heads ", r.kv_heads);
  TESSERA_CHECK(s.head_dim > 0, "attention: head_dim must be positive, got ", s.head_dim);
  TESSERA_CHECK(drop.p >= 0.0f && drop.p < 1.0f, "attention: dropout p must be in [0, 1), got ", drop.p);
  TESSERA_CHECK(!(s.causal && s.bidirectional_doc_start), "attention: bidirectional_doc_start with causal attention");
  TESSERA_CHECK(s.causal || s.doc_start == nullptr || s.bidirectional_doc_start,
                "attention: a document mask needs causal attention (or bidirectional_doc_start)");
  TESSERA_CHECK(s.doc_start == nullptr || s.key_valid == nullptr, "attention: a document mask and a padding mask at once");
  TESSERA_CHECK(!s.causal || s.key_valid == nullptr, "attention: a padding mask needs bidirectional attention");
  r.group = r.heads / r.kv_heads;
  r.causal = s.causal;
  r.doc = s.doc_start;
  r.key_valid = s.key_valid;
  r.scale = scale;
  r.dropout = drop.p > 0.0f;
  r.p = drop.p;
  r.keep_scale = r.dropout ? 1.0f / (1.0f - drop.p) : 1.0f;
  r.mask_seq = drop.seq > 0 ? drop.seq : r.kv_seq;
  r.drop = drop;
  TESSERA_CHECK(drop.query_offset >= 0 && drop.key_offset >= 0 && r.mask_seq >= drop.key_offset + r.kv_seq &&
                    r.mask_seq >= drop.query_offset + r.kv_seq,
                "attention: dropout keyed by a sequence of ", r.mask_seq, " shorter than the ", r.kv_seq,
                " keys at offset ", drop.key_offset, " (queries at offset ", drop.query_offset, ")");
  if (r.dropout)
    TESSERA_CHECK(drop.head_offset >= 0 && drop.sample_offset >= 0 && drop.head_offset + r.heads <= drop.total_heads,
                  "attention: dropout heads [", drop.head_offset, ", ", drop.head_offset + r.heads,
                  ") do not fit in total_heads ", drop.total_heads);
  return r;
}

// Samples per launch: as many as keep `buffers` score buffers under the options' byte limit, one at least.
int64_t chunk_samples(const ScoreRows& r, const GemmAttentionOptions& o, int64_t buffers) {
  const int64_t per_sample = buffers * r.kv_heads * r.seq * r.kv_seq * static_cast<int64_t>(sizeof(float));
  return std::clamp<int64_t>(o.max_scores_bytes / per_sample, 1, r.batch);
}

// A strided batch of row-major matrices: matrix t at p + t * stride, row stride ld.
struct View {
  const float* p;
  int64_t ld, stride;
};

// The launch's [seq, d] query-shaped matrices (q, out, dout, dq): head kvh * group + member of each
// (sample, kv head), consecutive batch entries `group` heads apart.
View query_view(const ScoreRows& r, const float* base, int64_t d) {
  return {base + ((r.first_sample * r.kv_heads) * r.group + r.member) * d, r.batch * r.heads * d, r.group * d};
}
// The launch's [kv_seq, d] key-shaped matrices (k, v, dk, dv).
View kv_view(const ScoreRows& r, const float* base, int64_t d) {
  return {base + r.first_sample * r.kv_heads * d, r.batch * r.kv_heads * d, d};
}
// The launch's [seq, kv_seq] score matrices.
View scores_view(const ScoreRows& r, const float* scores) { return {scores, r.kv_seq, r.seq * r.kv_seq}; }

// C = alpha op(A) op(B) + beta C over the launch's samples * kv_heads matrices.
void launch(RowOps& ops, const ScoreRows& r, Trans ta, View a, Trans tb, View b, View c, int64_t m, int64_t n,
            int64_t k, float alpha, float beta, DType input) {
  GemmArgs g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a.p;
  g.lda = a.ld;
  g.stride_a = a.stride;
  g.b = b.p;
  g.ldb = b.ld;
  g.stride_b = b.stride;
  g.c = const_cast<float*>(c.p);  // the output view
  g.ldc = c.ld;
  g.stride_c = c.stride;
  g.alpha = alpha;
  g.beta = beta;
  g.batch = r.samples * r.kv_heads;
  g.input_type = input;
  g.stream = Stream::default_for(ops.device());
  ops.batched_gemm(g);
}

// Scratch from the device, released when the scope ends (also on an exception).
class Scratch {
 public:
  Scratch(RowOps& ops, int64_t floats) : ops_(ops), floats_(floats), p_(ops.allocate(floats)) {}
  ~Scratch() { ops_.deallocate(p_, floats_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get() const { return p_; }

 private:
  RowOps& ops_;
  int64_t floats_;
  float* p_;
};

}  // namespace

void forward(RowOps& ops, const float* q, const float* k, const float* v, float* out, float* lse,
             const AttentionShape& shape, float softmax_scale, const AttentionDropout& dropout,
             const GemmAttentionOptions& options) {
  ScoreRows r = checked_rows(shape, softmax_scale, dropout);
  const int64_t d = shape.head_dim, chunk = chunk_samples(r, options, 1);
  const Scratch scores(ops, chunk * r.kv_heads * r.seq * r.kv_seq);
  const DType in = options.gemm_input;
  for (int64_t b0 = 0; b0 < r.batch; b0 += chunk) {
    r.first_sample = b0;
    r.samples = std::min(chunk, r.batch - b0);
    for (r.member = 0; r.member < r.group; ++r.member) {
      const View s = scores_view(r, scores.get());
      // S = scale Q K^T
      launch(ops, r, Trans::N, query_view(r, q, d), Trans::T, kv_view(r, k, d), s, r.seq, r.kv_seq, d, softmax_scale,
             0.0f, in);
      ops.softmax_forward(r, scores.get(), lse);
      // O = (P o Z) V
      launch(ops, r, Trans::N, s, Trans::N, kv_view(r, v, d), query_view(r, out, d), r.seq, d, r.kv_seq, 1.0f, 0.0f,
             in);
    }
  }
}

void backward(RowOps& ops, const float* q, const float* k, const float* v, const float* lse, const float* dout,
              float* dq, float* dk, float* dv, const AttentionShape& shape, float softmax_scale,
              const AttentionDropout& dropout, const GemmAttentionOptions& options) {
  ScoreRows r = checked_rows(shape, softmax_scale, dropout);
  const int64_t d = shape.head_dim, chunk = chunk_samples(r, options, 2);
  const int64_t floats = chunk * r.kv_heads * r.seq * r.kv_seq;
  const Scratch scores(ops, floats), dp(ops, floats);
  const DType in = options.gemm_input;
  for (int64_t b0 = 0; b0 < r.batch; b0 += chunk) {
    r.first_sample = b0;
    r.samples = std::min(chunk, r.batch - b0);
    for (r.member = 0; r.member < r.group; ++r.member) {
      const View s = scores_view(r, scores.get()), p = scores_view(r, dp.get());
      const View qv = query_view(r, q, d), dov = query_view(r, dout, d), kv = kv_view(r, k, d), vv = kv_view(r, v, d);
      // S = scale Q K^T (recomputed), dP = dO V^T
      launch(ops, r, Trans::N, qv, Trans::T, kv, s, r.seq, r.kv_seq, d, softmax_scale, 0.0f, in);
      launch(ops, r, Trans::N, dov, Trans::T, vv, p, r.seq, r.kv_seq, d, 1.0f, 0.0f, in);
      ops.softmax_backward(r, scores.get(), dp.get(), lse);  // S -> dS (scale folded in), dP -> P o Z
      // The group's first member overwrites dK and dV, the others add to them.
      const float beta = r.member == 0 ? 0.0f : 1.0f;
      // dV += (P o Z)^T dO, dQ = dS K, dK += dS^T Q
      launch(ops, r, Trans::T, p, Trans::N, dov, kv_view(r, dv, d), r.kv_seq, d, r.seq, 1.0f, beta, in);
      launch(ops, r, Trans::N, s, Trans::N, kv, query_view(r, dq, d), r.seq, d, r.kv_seq, 1.0f, 0.0f, in);
      launch(ops, r, Trans::T, s, Trans::N, qv, kv_view(r, dk, d), r.kv_seq, d, r.seq, 1.0f, beta, in);
    }
  }
}

}  // namespace tessera::kernels::gemm_attention
