// The CPU's RowOps (kernels/cpu/gemm_attention_rows.h).
#include "kernels/cpu/gemm_attention_rows.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/philox.h"
#include "kernels/math/dropout.h"
#include "kernels/math/softmax.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {
namespace {

using gemm_attention::ScoreRows;

// The dropout factor of probability (b, h, i, j): 1/(1-p) kept, 0 dropped, 1 without dropout.
float factor(const ScoreRows& r, const PhiloxStream& rng, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (!r.dropout) return 1.0f;
  return math::dropout_keeps(rng.bits(r.dropout_element(b, h, i, j)), r.p) ? r.keep_scale : 0.0f;
}

class CpuRowOps final : public gemm_attention::RowOps {
 public:
  Device device() const override { return Device::cpu(); }

  void batched_gemm(const GemmArgs& g) override {
    GemmArgs one = g;
    one.batch = 1;
    for (int64_t t = 0; t < g.batch; ++t) {
      one.a = g.a + t * g.stride_a;
      one.b = g.b + t * g.stride_b;
      one.c = g.c + t * g.stride_c;
      kernels::gemm(one);
    }
  }

  void softmax_forward(const ScoreRows& r, float* scores, float* lse) override {
    const PhiloxStream rng(r.drop.seed, r.drop.stream);
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(r.rows() * r.kv_seq * 8))
    for (int64_t n = 0; n < r.rows(); ++n) {
      const ScoreRows::Row w = r.row(n);
      float* s = scores + n * r.kv_seq;
      const int64_t lo = r.first_key(w.b, w.i), hi = r.end_key(w.i);
      float m = -INFINITY;
      for (int64_t j = lo; j < hi; ++j)
        if (r.kept(w.b, j)) m = std::max(m, s[j]);
      float l = 0.0f;
      for (int64_t j = lo; j < hi; ++j)
        if (r.kept(w.b, j)) l += math::softmax_weight(s[j], m);
      // A row that sees no key (bidirectional_doc_start past every key): P = 0, lse -inf, as the CPU kernel.
      const float row_lse = l == 0.0f ? -INFINITY : math::softmax_lse(m, l);
      lse[w.lse] = row_lse;
      for (int64_t j = 0; j < r.kv_seq; ++j)
        s[j] = j >= lo && j < hi && r.kept(w.b, j) ? math::softmax_weight(s[j], row_lse) * factor(r, rng, w.b, w.h, w.i, j)
                                                   : 0.0f;
    }
  }

  void softmax_backward(const ScoreRows& r, float* scores, float* dp, const float* lse) override {
    const PhiloxStream rng(r.drop.seed, r.drop.stream);
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(r.rows() * r.kv_seq * 8))
    for (int64_t n = 0; n < r.rows(); ++n) {
      const ScoreRows::Row w = r.row(n);
      float* s = scores + n * r.kv_seq;
      float* g = dp + n * r.kv_seq;
      const int64_t lo = r.first_key(w.b, w.i), hi = r.end_key(w.i);
      const float row_lse = lse[w.lse];
      // D_i = sum_j P_ij Z_ij dP_ij, which is dO_i . O_i.
      float D = 0.0f;
      for (int64_t j = lo; j < hi; ++j)
        if (r.kept(w.b, j))
          D += math::softmax_weight(s[j], row_lse) * factor(r, rng, w.b, w.h, w.i, j) * g[j];
      for (int64_t j = 0; j < r.kv_seq; ++j) {
        if (j < lo || j >= hi || !r.kept(w.b, j)) {
          s[j] = g[j] = 0.0f;
          continue;
        }
        const float prob = math::softmax_weight(s[j], row_lse), z = factor(r, rng, w.b, w.h, w.i, j);
        s[j] = r.scale * prob * (g[j] * z - D);
        g[j] = prob * z;
      }
    }
  }

  float* allocate(int64_t floats) override { return new float[static_cast<size_t>(std::max<int64_t>(floats, 1))]; }
  void deallocate(float* p, int64_t) override { delete[] p; }
};

}  // namespace

gemm_attention::RowOps& gemm_attention_row_ops() {
  static CpuRowOps ops;
  return ops;
}

}  // namespace tessera::kernels::cpu
