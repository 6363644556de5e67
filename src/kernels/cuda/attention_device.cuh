// What attention.cu's row-per-warp kernels and attention_tiled.cu's tiled kernels share: the call's
// geometry, each query row's key span and the masks, the score, the dropout factor, the softmax gradient
// and the warp helpers (kernels/cuda/attention.h describes the scheme). The device functions are inline:
// each .cu that includes them compiles its own copy (no relocatable device code).
#pragma once

#include <cuda_runtime.h>
#include <math.h>

#include <algorithm>
#include <cstdint>

#include "core/philox.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/dropout.h"
#include "kernels/math/softmax.h"

namespace tessera::kernels::cuda::attention_detail {

inline constexpr unsigned kFullMask = 0xffffffffu;
inline constexpr int kWarp = 32;

// What every kernel needs of the call, by value (the masks are device pointers).
struct Geometry {
  int64_t seq, batch, heads, kv_heads, d, group;
  int64_t kv_seq, offset;       // keys, and query 0's position among them (kv_seq - seq)
  int64_t mask_seq;             // the sequence length dropout is keyed by (AttentionDropout::seq)
  int64_t q_stride, kv_stride;  // floats between consecutive positions of one (batch, head)
  bool causal;
  const int32_t* doc;        // first key per query ([batch, seq]) or nullptr
  const int32_t* key_valid;  // bidirectional padding mask ([batch, seq]) or nullptr
  float scale;
  bool dropout;
  float p, keep_scale;
  AttentionDropout drop;
};
// The keys [lo, hi) query row i of sample b may see before the padding mask: causal, up to its position
// offset + i, from its document's start; bidirectional, every key from its first (doc_start; seq: none).
struct Span {
  int64_t lo, hi;
};
__device__ inline Span key_span(const Geometry& g, int64_t b, int64_t i) {
  const int64_t lo = g.doc != nullptr ? g.doc[b * g.seq + i] : 0;
  return {lo, g.causal ? g.offset + i + 1 : g.kv_seq};
}

// Whether key j of sample b survives the padding mask (always, causal or without one).
__device__ inline bool key_kept(const Geometry& g, int64_t b, int64_t j) {
  return g.key_valid == nullptr || g.key_valid[b * g.seq + j] != 0;
}

// The scaled score of query row qi against key row kj: (scale q) . k, the query scaled first as the CPU's
// forward does.
__device__ inline float score(const float* qi, const float* kj, int64_t d, float scale) {
  float s = 0.0f;
  for (int64_t x = 0; x < d; ++x) s += qi[x] * scale * kj[x];
  return s;
}

__device__ inline float dot(const float* a, const float* b, int64_t d) {
  float s = 0.0f;
  for (int64_t x = 0; x < d; ++x) s += a[x] * b[x];
  return s;
}

// The dropout factor of probability (b, h, i, j), i a query row and j a key: 1/(1-p) where its Philox
// element is kept, 0 where dropped (1 without dropout). The element as the CPU keys it: positions among
// the keys, plus AttentionDropout's offsets.
__device__ inline float dropout_factor(const Geometry& g, const PhiloxStream& rng, int64_t b, int64_t h, int64_t i,
                                int64_t j) {
  if (!g.dropout) return 1.0f;
  const uint64_t e = math::attention_dropout_row(g.drop, g.mask_seq, b, h, g.drop.query_offset + g.offset + i) +
                     static_cast<uint64_t>(g.drop.key_offset + j);
  return math::dropout_keeps(rng.bits(e), g.p) ? g.keep_scale : 0.0f;
}

// This thread's warp among all the grid's, and its lane.
__device__ inline int64_t global_warp() { return grid_index() / kWarp; }
__device__ inline int lane_id() { return static_cast<int>(threadIdx.x) & (kWarp - 1); }

// row[x] += sum_{t < n} w_t * src[t * stride + x] for every column x < d, with w_t lane t's `w`: each
// lane adds into its own columns (lane, lane + 32, ...). Every lane of the warp must call it with the same
// n and d (the shuffles need all 32), so the column loop runs to d rounded up and guards the access.
__device__ inline void add_weighted_rows(float* row, float w, const float* src, int64_t stride, int n, int64_t d) {
  const int lane = lane_id();
  for (int64_t x0 = 0; x0 < d; x0 += kWarp) {
    const int64_t x = x0 + lane;
    float acc = 0.0f;
    for (int t = 0; t < n; ++t) {
      const float wt = __shfl_sync(kFullMask, w, t);
      if (x < d) acc += wt * src[t * stride + x];
    }
    if (x < d) row[x] += acc;
  }
}

// Zeroes a row of d floats with the warp's lanes.
__device__ inline void zero_row(float* row, int64_t d) {
  for (int64_t x = lane_id(); x < d; x += kWarp) row[x] = 0.0f;
}


// dS_ij = scale P_ij (dP_ij Z_ij - D_i) with P_ij = exp(s_ij - lse_i), dP_ij = dO_i . v_j, Z the dropout
// factor; pz = P_ij Z_ij (dV's weight). The score as forward computed it.
struct Grad {
  float pz, ds;
};
__device__ inline Grad prob_grad(const Geometry& g, const PhiloxStream& rng, const float* qi, const float* doi,
                          const float* kj, const float* vj, float lse_i, float D_i, int64_t b, int64_t h, int64_t i,
                          int64_t j) {
  const float prob = math::softmax_weight(score(qi, kj, g.d, g.scale), lse_i), z = dropout_factor(g, rng, b, h, i, j);
  return {prob * z, g.scale * prob * (dot(doi, vj, g.d) * z - D_i)};
}

// The tiled kernels (attention_tiled.cu). Each launches on the current stream where its tiles fit in the
// shared memory a block gets by default and returns whether it did; the caller runs the row-per-warp
// kernel otherwise.
bool forward_tiled(const Geometry& g, const float* q, const float* k, const float* v, float* out, float* lse);
bool dq_tiled(const Geometry& g, const float* q, const float* k, const float* v, const float* lse, const float* dout,
              const float* D, float* dq);
bool dkdv_tiled(const Geometry& g, const float* q, const float* k, const float* v, const float* lse,
                const float* dout, const float* D, float* dk, float* dv);

}  // namespace tessera::kernels::cuda::attention_detail
