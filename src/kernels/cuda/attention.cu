// Attention on the GPU (kernels/cuda/attention.h): the CPU kernel's semantics (kernels/cpu/attention.cc).
//
// Forward: one warp per query row (b, h, i). Lane t takes the keys j = lo + t, lo + 32 + t, ... of the
// row's visible span [lo, hi), so no score matrix is ever stored. Pass 1 keeps per lane a running max
// and sum (kernels/math/softmax.h), merged across the warp into the row's log-sum-exp; pass 2 recomputes
// the scores tile by tile (32 keys), P = exp(s - lse) times the dropout factor, and adds P V into the
// output row (each lane owns the row's columns x = lane, lane + 32, ...; the tile's P is passed round by
// shuffles). The output row belongs to the warp alone, so it is the accumulator.
//
// Backward (FlashAttention-2's formulas, as the CPU): D_i = dO_i . O_i, one thread per query row; dQ one
// warp per query row over its keys, as forward's pass 2; dK and dV one warp per key row over the query
// rows (of every query head of its GQA group) that see it, P recomputed from lse. Each gradient row is
// written by one warp, summing in a fixed order: deterministic, no atomics.
//
// Two implementations of that scheme (cuda/attention.h's attention_kernels() chooses): the tiled kernels
// (opt-in until the device check has run them) put 8 rows of one (batch, head) in
// a block and load each tile of 32 keys (dK/dV: queries) into shared memory once for the block, so K and
// V (Q and dO) are read from global memory once per 8 rows, coalesced, rather than once per row with each
// lane on its own row; the row-per-warp kernels, which read them straight from global memory, remain for
// head dims whose tiles exceed the 48 KiB of shared memory a block gets by default (dQ past 139, the
// others past 152).
//
// Dropout draws each probability's Philox element with the CPU's keying (kernels/math/dropout.h), so the
// masks are the same bits. The mask tensors are device data; they are copied to the host once per call
// and checked as the CPU checks them (a synchronisation a faster kernel may drop).
#include <cuda_runtime.h>
#include <math.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "core/philox.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/math/dropout.h"
#include "kernels/math/softmax.h"

namespace tessera::kernels::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

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

// The checks kernels/cpu/attention.cc's Plan makes, with its messages, the masks' on a host copy.
Geometry checked_geometry(const AttentionShape& s, float scale, const AttentionDropout& drop) {
  Geometry g{};
  g.seq = s.seq;
  g.batch = s.batch;
  g.heads = s.heads;
  g.kv_heads = s.kv_heads;
  g.d = s.head_dim;
  TESSERA_CHECK(g.seq >= 0 && g.batch >= 0, "attention: negative seq ", g.seq, " or batch ", g.batch);
  g.kv_seq = s.kv_seq > 0 ? s.kv_seq : g.seq;
  g.offset = g.kv_seq - g.seq;
  g.mask_seq = drop.seq > 0 ? drop.seq : g.kv_seq;
  TESSERA_CHECK(g.offset >= 0, "attention: kv_seq ", g.kv_seq, " is shorter than the ", g.seq, " queries");
  TESSERA_CHECK(g.offset == 0 || (s.causal && s.doc_start == nullptr), "attention: kv_seq ", g.kv_seq, " != seq ",
                g.seq, " needs causal attention without a document mask");
  TESSERA_CHECK(drop.query_offset >= 0 && drop.key_offset >= 0 && g.mask_seq >= drop.key_offset + g.kv_seq &&
                    g.mask_seq >= drop.query_offset + g.kv_seq,
                "attention: dropout keyed by a sequence of ", g.mask_seq, " shorter than the ", g.kv_seq,
                " keys at offset ", drop.key_offset, " (queries at offset ", drop.query_offset, ")");
  TESSERA_CHECK(g.heads > 0 && g.kv_heads > 0 && g.heads % g.kv_heads == 0, "attention: heads ", g.heads,
                " must be a positive multiple of kv_heads ", g.kv_heads);
  TESSERA_CHECK(g.d > 0, "attention: head_dim must be positive, got ", g.d);
  TESSERA_CHECK(drop.p >= 0.0f && drop.p < 1.0f, "attention: dropout p must be in [0, 1), got ", drop.p);
  g.group = g.heads / g.kv_heads;
  g.q_stride = g.batch * g.heads * g.d;
  g.kv_stride = g.batch * g.kv_heads * g.d;
  g.causal = s.causal;
  g.doc = s.doc_start;
  g.key_valid = s.key_valid;
  g.scale = scale;
  g.dropout = drop.p > 0.0f;
  g.p = drop.p;
  g.keep_scale = g.dropout ? 1.0f / (1.0f - drop.p) : 1.0f;
  g.drop = drop;
  TESSERA_CHECK(!(g.causal && s.bidirectional_doc_start), "attention: bidirectional_doc_start with causal attention");
  TESSERA_CHECK(g.causal || g.doc == nullptr || s.bidirectional_doc_start,
                "attention: a document mask needs causal attention (or bidirectional_doc_start)");
  TESSERA_CHECK(g.doc == nullptr || g.key_valid == nullptr, "attention: a document mask and a padding mask at once");
  TESSERA_CHECK(!g.causal || g.key_valid == nullptr, "attention: a padding mask needs bidirectional attention");
  const int32_t* device_mask = g.doc != nullptr ? g.doc : g.key_valid;
  if (device_mask != nullptr && g.batch * g.seq > 0) {
    std::vector<int32_t> mask(static_cast<size_t>(g.batch * g.seq));
    tessera::cuda::check(
        cudaMemcpy(mask.data(), device_mask, mask.size() * sizeof(int32_t), cudaMemcpyDeviceToHost),
        "attention: copying the mask to check it");
    for (int64_t b = 0; b < g.batch; ++b) {
      const int32_t* m = mask.data() + b * g.seq;
      if (g.key_valid != nullptr) {
        TESSERA_CHECK(std::any_of(m, m + g.seq, [](int32_t x) { return x != 0; }),
                      "attention: the padding mask of sample ", b, " hides every key");
        continue;
      }
      for (int64_t i = 0; i < g.seq; ++i) {
        const int64_t last = g.causal ? i : g.seq;  // bidirectional: seq is a row that sees no key
        TESSERA_CHECK(m[i] >= (i == 0 ? 0 : m[i - 1]) && m[i] <= last, "attention: doc_start of sample ", b,
                      " position ", i, " is ", m[i], "; it must lie in [", i == 0 ? 0 : m[i - 1], ", ", last,
                      "] (at most ", g.causal ? "i" : "seq", ", never below the previous position's, never negative)");
      }
    }
  }
  if (g.dropout)
    TESSERA_CHECK(drop.head_offset >= 0 && drop.sample_offset >= 0 && drop.head_offset + g.heads <= drop.total_heads,
                  "attention: dropout heads [", drop.head_offset, ", ", drop.head_offset + g.heads,
                  ") do not fit in total_heads ", drop.total_heads);
  return g;
}

// The keys [lo, hi) query row i of sample b may see before the padding mask: causal, up to its position
// offset + i, from its document's start; bidirectional, every key from its first (doc_start; seq: none).
struct Span {
  int64_t lo, hi;
};
__device__ Span key_span(const Geometry& g, int64_t b, int64_t i) {
  const int64_t lo = g.doc != nullptr ? g.doc[b * g.seq + i] : 0;
  return {lo, g.causal ? g.offset + i + 1 : g.kv_seq};
}

// Whether key j of sample b survives the padding mask (always, causal or without one).
__device__ bool key_kept(const Geometry& g, int64_t b, int64_t j) {
  return g.key_valid == nullptr || g.key_valid[b * g.seq + j] != 0;
}

// The scaled score of query row qi against key row kj: (scale q) . k, the query scaled first as the CPU's
// forward does.
__device__ float score(const float* qi, const float* kj, int64_t d, float scale) {
  float s = 0.0f;
  for (int64_t x = 0; x < d; ++x) s += qi[x] * scale * kj[x];
  return s;
}

__device__ float dot(const float* a, const float* b, int64_t d) {
  float s = 0.0f;
  for (int64_t x = 0; x < d; ++x) s += a[x] * b[x];
  return s;
}

// The dropout factor of probability (b, h, i, j), i a query row and j a key: 1/(1-p) where its Philox
// element is kept, 0 where dropped (1 without dropout). The element as the CPU keys it: positions among
// the keys, plus AttentionDropout's offsets.
__device__ float dropout_factor(const Geometry& g, const PhiloxStream& rng, int64_t b, int64_t h, int64_t i,
                                int64_t j) {
  if (!g.dropout) return 1.0f;
  const uint64_t e = math::attention_dropout_row(g.drop, g.mask_seq, b, h, g.drop.query_offset + g.offset + i) +
                     static_cast<uint64_t>(g.drop.key_offset + j);
  return math::dropout_keeps(rng.bits(e), g.p) ? g.keep_scale : 0.0f;
}

// This thread's warp among all the grid's, and its lane.
__device__ int64_t global_warp() { return grid_index() / kWarp; }
__device__ int lane_id() { return static_cast<int>(threadIdx.x) & (kWarp - 1); }

// row[x] += sum_{t < n} w_t * src[t * stride + x] for every column x < d, with w_t lane t's `w`: each
// lane adds into its own columns (lane, lane + 32, ...). Every lane of the warp must call it with the same
// n and d (the shuffles need all 32), so the column loop runs to d rounded up and guards the access.
__device__ void add_weighted_rows(float* row, float w, const float* src, int64_t stride, int n, int64_t d) {
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
__device__ void zero_row(float* row, int64_t d) {
  for (int64_t x = lane_id(); x < d; x += kWarp) row[x] = 0.0f;
}

// One warp per query row r = (b * heads + h) * seq + i: lse's order.
__global__ void forward_kernel(Geometry g, const float* q, const float* k, const float* v, float* out, float* lse) {
  const int64_t row = global_warp();
  if (row >= g.batch * g.heads * g.seq) return;  // the whole warp
  const int lane = lane_id();
  const int64_t i = row % g.seq, b = row / g.seq / g.heads, h = row / g.seq % g.heads, kvh = h / g.group;
  const float* qi = q + i * g.q_stride + (b * g.heads + h) * g.d;
  const float* kh = k + (b * g.kv_heads + kvh) * g.d;  // key j at kh + j * kv_stride
  const float* vh = v + (b * g.kv_heads + kvh) * g.d;
  float* oi = out + i * g.q_stride + (b * g.heads + h) * g.d;
  const Span span = key_span(g, b, i);

  // Pass 1: each lane's max and sum of exp over its keys, then the warp's.
  math::SoftmaxStats st{-INFINITY, 0.0f};
  for (int64_t j = span.lo + lane; j < span.hi; j += kWarp)
    if (key_kept(g, b, j)) st = math::softmax_merge(st, {score(qi, kh + j * g.kv_stride, g.d, g.scale), 1.0f});
  for (int o = kWarp / 2; o > 0; o >>= 1)
    st = math::softmax_merge(st, {__shfl_xor_sync(kFullMask, st.max, o), __shfl_xor_sync(kFullMask, st.sum, o)});
  // Lane 0's for all: merges in mirrored order can round apart (fused multiply-adds).
  st.max = __shfl_sync(kFullMask, st.max, 0);
  st.sum = __shfl_sync(kFullMask, st.sum, 0);

  zero_row(oi, g.d);
  // A row that sees no key (bidirectional_doc_start past every key): output 0, log-sum-exp -inf.
  const float row_lse = st.sum == 0.0f ? -INFINITY : math::softmax_lse(st.max, st.sum);
  if (lane == 0) lse[row] = row_lse;
  if (st.sum == 0.0f) return;  // the whole warp

  // Pass 2: out_i = sum_j exp(s_ij - lse_i) z_ij v_j, a tile of 32 keys at a time.
  const PhiloxStream rng(g.drop.seed, g.drop.stream);
  for (int64_t j0 = span.lo; j0 < span.hi; j0 += kWarp) {
    const int64_t j = j0 + lane;
    float w = 0.0f;
    if (j < span.hi && key_kept(g, b, j))
      w = math::softmax_weight(score(qi, kh + j * g.kv_stride, g.d, g.scale), row_lse) *
          dropout_factor(g, rng, b, h, i, j);
    const int n = static_cast<int>(std::min<int64_t>(kWarp, span.hi - j0));
    add_weighted_rows(oi, w, vh + j0 * g.kv_stride, g.kv_stride, n, g.d);
  }
}

// D_i = dO_i . O_i, one thread per query row r = (b * heads + h) * seq + i, summed in column order.
__global__ void row_dot_kernel(Geometry g, const float* out, const float* dout, float* D) {
  const int64_t rows = g.batch * g.heads * g.seq;
  for (int64_t row = grid_index(); row < rows; row += grid_stride()) {
    const int64_t i = row % g.seq, bh = row / g.seq;
    const int64_t off = i * g.q_stride + bh * g.d;  // bh = b * heads + h
    D[row] = dot(dout + off, out + off, g.d);
  }
}

// dS_ij = scale P_ij (dP_ij Z_ij - D_i) with P_ij = exp(s_ij - lse_i), dP_ij = dO_i . v_j, Z the dropout
// factor; pz = P_ij Z_ij (dV's weight). The score as forward computed it.
struct Grad {
  float pz, ds;
};
__device__ Grad prob_grad(const Geometry& g, const PhiloxStream& rng, const float* qi, const float* doi,
                          const float* kj, const float* vj, float lse_i, float D_i, int64_t b, int64_t h, int64_t i,
                          int64_t j) {
  const float prob = math::softmax_weight(score(qi, kj, g.d, g.scale), lse_i), z = dropout_factor(g, rng, b, h, i, j);
  return {prob * z, g.scale * prob * (dot(doi, vj, g.d) * z - D_i)};
}

// dQ_i = sum_j dS_ij k_j, one warp per query row (forward's order of rows and keys).
__global__ void dq_kernel(Geometry g, const float* q, const float* k, const float* v, const float* lse,
                          const float* dout, const float* D, float* dq) {
  const int64_t row = global_warp();
  if (row >= g.batch * g.heads * g.seq) return;  // the whole warp
  const int lane = lane_id();
  const int64_t i = row % g.seq, b = row / g.seq / g.heads, h = row / g.seq % g.heads, kvh = h / g.group;
  const int64_t off = i * g.q_stride + (b * g.heads + h) * g.d;
  const float* kh = k + (b * g.kv_heads + kvh) * g.d;
  const float* vh = v + (b * g.kv_heads + kvh) * g.d;
  float* dqi = dq + off;
  zero_row(dqi, g.d);
  const Span span = key_span(g, b, i);  // empty for a row that sees no key, whose lse is -inf
  const PhiloxStream rng(g.drop.seed, g.drop.stream);
  for (int64_t j0 = span.lo; j0 < span.hi; j0 += kWarp) {
    const int64_t j = j0 + lane;
    float ds = 0.0f;
    if (j < span.hi && key_kept(g, b, j))
      ds = prob_grad(g, rng, q + off, dout + off, kh + j * g.kv_stride, vh + j * g.kv_stride, lse[row], D[row], b, h,
                     i, j)
               .ds;
    const int n = static_cast<int>(std::min<int64_t>(kWarp, span.hi - j0));
    add_weighted_rows(dqi, ds, kh + j0 * g.kv_stride, g.kv_stride, n, g.d);
  }
}

// dV_j = sum_i P_ij Z_ij dO_i and dK_j = sum_i dS_ij q_i over the query rows i of every head of key j's
// group that see key j; one warp per key row r = (b * kv_heads + kvh) * kv_seq + j.
__global__ void dkdv_kernel(Geometry g, const float* q, const float* k, const float* v, const float* lse,
                            const float* dout, const float* D, float* dk, float* dv) {
  const int64_t row = global_warp();
  if (row >= g.batch * g.kv_heads * g.kv_seq) return;  // the whole warp
  const int lane = lane_id();
  const int64_t j = row % g.kv_seq, b = row / g.kv_seq / g.kv_heads, kvh = row / g.kv_seq % g.kv_heads;
  const int64_t kv_off = j * g.kv_stride + (b * g.kv_heads + kvh) * g.d;
  float* dkj = dk + kv_off;
  float* dvj = dv + kv_off;
  zero_row(dkj, g.d);
  zero_row(dvj, g.d);
  if (!key_kept(g, b, j)) return;  // padding: no query sees it (the whole warp)
  // The query rows that may see key j: causal, those at or after it; with a document mask (doc_start
  // non-decreasing), of those the prefix whose document starts at or before j, which is checked per row.
  const int64_t i_lo = g.causal ? std::max<int64_t>(0, j - g.offset) : 0;
  const PhiloxStream rng(g.drop.seed, g.drop.stream);
  for (int64_t gi = 0; gi < g.group; ++gi) {
    const int64_t h = kvh * g.group + gi, bh = b * g.heads + h;
    for (int64_t i0 = i_lo; i0 < g.seq; i0 += kWarp) {
      const int64_t i = i0 + lane;
      Grad gr{0.0f, 0.0f};
      if (i < g.seq && (g.doc == nullptr || g.doc[b * g.seq + i] <= j)) {
        const int64_t off = i * g.q_stride + bh * g.d;
        gr = prob_grad(g, rng, q + off, dout + off, k + kv_off, v + kv_off, lse[bh * g.seq + i], D[bh * g.seq + i],
                       b, h, i, j);
      }
      const int n = static_cast<int>(std::min<int64_t>(kWarp, g.seq - i0));
      add_weighted_rows(dvj, gr.pz, dout + i0 * g.q_stride + bh * g.d, g.q_stride, n, g.d);
      add_weighted_rows(dkj, gr.ds, q + i0 * g.q_stride + bh * g.d, g.q_stride, n, g.d);
    }
  }
}

// ---- Tiled kernels: the same per-row work, with the other side's rows shared through shared memory ----
//
// The kernels above read every key (or query) row from global memory once per row that uses it, each
// lane a different row: uncoalesced, and the whole K/V of a head re-read by every query row. The tiled
// kernels give a block kTileRows rows of one (batch, head), one warp per row as above, and loop over
// tiles of kTile keys (or queries) that the block loads into shared memory once, coalesced, for all its
// rows. Each warp does what the kernel above does for its row, lane t taking the tile's row t, with the
// same per-element helpers; only the tiles' origin (the block's first key rather than the row's) differs,
// which changes the order of the float sums, not the terms. Every output row still has one writer (its
// warp) summing in a fixed order. A warp with no row (past the end) or nothing to add still takes part in
// every load and barrier: __syncthreads must be reached by the whole block.
constexpr int kTileRows = 8;  // rows per block, one per warp
constexpr int kTile = 32;     // rows per shared tile, one per lane (add_weighted_rows passes weights by shuffles)
constexpr int kTileThreads = kTileRows * kWarp;
constexpr size_t kMaxTileShared = 48 * 1024;  // the dynamic shared memory a launch may use without opting in

// A tile row's stride in shared memory: head_dim made odd, so that lane t reading column x of row t hits
// bank (t * ld + x) % 32, a different bank per lane (a stride of 64 would put all 32 lanes on one bank).
__host__ __device__ int64_t tile_ld(int64_t d) { return d | 1; }

// Shared floats per block: two tiles of kTile rows, `rows` per-warp rows of d floats, `extra` floats.
size_t tile_shared_bytes(int64_t d, int rows, int extra) {
  return static_cast<size_t>(2 * kTile * tile_ld(d) + rows * kTileRows * d + extra) * sizeof(float);
}

// tile row t = src row r0 + t (src row r at src + r * stride) for t < kTile, zeros for rows at or past
// `end`; all the block's threads share the copy, consecutive threads on consecutive columns (coalesced).
__device__ void load_tile(float* tile, const float* src, int64_t stride, int64_t r0, int64_t end, int64_t d) {
  const int64_t ld = tile_ld(d);
  for (int64_t e = threadIdx.x; e < kTile * d; e += blockDim.x) {
    const int64_t t = e / d, x = e % d;
    tile[t * ld + x] = r0 + t < end ? src[(r0 + t) * stride + x] : 0.0f;
  }
}

// The (batch, head) and the first of the kTileRows rows (of `rows` per head) that this block takes.
struct TileBlock {
  int64_t bh, r0;
};
__device__ TileBlock tile_block(int64_t rows) {
  const int64_t per_head = (rows + kTileRows - 1) / kTileRows;
  return {static_cast<int64_t>(blockIdx.x) / per_head, static_cast<int64_t>(blockIdx.x) % per_head * kTileRows};
}

// The union of the key spans of query rows [i0, min(i0 + kTileRows, seq)) of sample b: the keys the block
// loads. Every thread computes it (a few reads), so the tile loop's bounds are the same block-wide.
__device__ Span block_key_span(const Geometry& g, int64_t b, int64_t i0) {
  Span u{g.kv_seq, 0};
  for (int64_t i = i0; i < i0 + kTileRows && i < g.seq; ++i) {
    const Span s = key_span(g, b, i);
    if (s.lo < s.hi) u = {std::min(u.lo, s.lo), std::max(u.hi, s.hi)};
  }
  return u;
}

// Whether keys [j0, j0 + kTile) meet span s: a warp skips the tiles its row does not see (warp-uniform).
__device__ bool tile_meets(const Span& s, int64_t j0) { return j0 < s.hi && j0 + kTile > s.lo; }

// Forward: forward_kernel's two passes per warp, K tiles (pass 1) and K and V tiles (pass 2) shared by
// the block's kTileRows query rows of one (batch, head). Shared: K tile, V tile, the warps' scaled-later
// query rows and output accumulators.
__global__ void forward_tiled_kernel(Geometry g, const float* q, const float* k, const float* v, float* out,
                                     float* lse) {
  extern __shared__ float tile_shared[];
  const int64_t ld = tile_ld(g.d);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = lane_id();
  float* ks = tile_shared;
  float* vs = ks + kTile * ld;
  float* qs = vs + kTile * ld + warp * g.d;                 // this warp's query row
  float* acc = vs + kTile * ld + (kTileRows + warp) * g.d;  // and its output row
  const TileBlock blk = tile_block(g.seq);
  const int64_t b = blk.bh / g.heads, h = blk.bh % g.heads, kvh = h / g.group, i = blk.r0 + warp;
  const bool has_row = i < g.seq;
  const float* kh = k + (b * g.kv_heads + kvh) * g.d;
  const float* vh = v + (b * g.kv_heads + kvh) * g.d;
  const Span span = has_row ? key_span(g, b, i) : Span{0, 0};
  const Span block = block_key_span(g, b, blk.r0);
  for (int64_t x = lane; x < g.d; x += kWarp) {
    qs[x] = has_row ? q[i * g.q_stride + blk.bh * g.d + x] : 0.0f;
    acc[x] = 0.0f;
  }  // read only by this warp, after the tile loops' first barrier

  // Pass 1: each lane's max and sum of exp over its keys (tile row `lane`), then the warp's.
  math::SoftmaxStats st{-INFINITY, 0.0f};
  for (int64_t j0 = block.lo; j0 < block.hi; j0 += kTile) {
    __syncthreads();  // every warp is done with the previous tile
    load_tile(ks, kh, g.kv_stride, j0, block.hi, g.d);
    __syncthreads();
    const int64_t j = j0 + lane;
    if (has_row && j >= span.lo && j < span.hi && key_kept(g, b, j))
      st = math::softmax_merge(st, {score(qs, ks + lane * ld, g.d, g.scale), 1.0f});
  }
  for (int o = kWarp / 2; o > 0; o >>= 1)
    st = math::softmax_merge(st, {__shfl_xor_sync(kFullMask, st.max, o), __shfl_xor_sync(kFullMask, st.sum, o)});
  st.max = __shfl_sync(kFullMask, st.max, 0);  // lane 0's for all, as forward_kernel
  st.sum = __shfl_sync(kFullMask, st.sum, 0);
  // A row that sees no key: output 0 (acc stays zero), log-sum-exp -inf.
  const float row_lse = st.sum == 0.0f ? -INFINITY : math::softmax_lse(st.max, st.sum);
  if (has_row && lane == 0) lse[blk.bh * g.seq + i] = row_lse;
  const bool adds = has_row && st.sum != 0.0f;  // warp-uniform

  // Pass 2: out_i = sum_j exp(s_ij - lse_i) z_ij v_j, tile by tile.
  const PhiloxStream rng(g.drop.seed, g.drop.stream);
  for (int64_t j0 = block.lo; j0 < block.hi; j0 += kTile) {
    __syncthreads();
    load_tile(ks, kh, g.kv_stride, j0, block.hi, g.d);
    load_tile(vs, vh, g.kv_stride, j0, block.hi, g.d);
    __syncthreads();
    if (!adds || !tile_meets(span, j0)) continue;
    const int64_t j = j0 + lane;
    float w = 0.0f;
    if (j >= span.lo && j < span.hi && key_kept(g, b, j))
      w = math::softmax_weight(score(qs, ks + lane * ld, g.d, g.scale), row_lse) * dropout_factor(g, rng, b, h, i, j);
    const int n = static_cast<int>(std::min<int64_t>(kTile, block.hi - j0));
    add_weighted_rows(acc, w, vs, ld, n, g.d);
  }
  if (has_row)
    for (int64_t x = lane; x < g.d; x += kWarp) out[i * g.q_stride + blk.bh * g.d + x] = acc[x];
}

// dQ: dq_kernel per warp over K and V tiles shared by the block's query rows. Shared: K tile, V tile,
// the warps' query rows, dO rows and dQ accumulators.
__global__ void dq_tiled_kernel(Geometry g, const float* q, const float* k, const float* v, const float* lse,
                                const float* dout, const float* D, float* dq) {
  extern __shared__ float tile_shared[];
  const int64_t ld = tile_ld(g.d);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = lane_id();
  float* ks = tile_shared;
  float* vs = ks + kTile * ld;
  float* qs = vs + kTile * ld + warp * g.d;
  float* dos = vs + kTile * ld + (kTileRows + warp) * g.d;
  float* acc = vs + kTile * ld + (2 * kTileRows + warp) * g.d;
  const TileBlock blk = tile_block(g.seq);
  const int64_t b = blk.bh / g.heads, h = blk.bh % g.heads, kvh = h / g.group, i = blk.r0 + warp;
  const bool has_row = i < g.seq;
  const int64_t off = i * g.q_stride + blk.bh * g.d, row = blk.bh * g.seq + i;
  const float* kh = k + (b * g.kv_heads + kvh) * g.d;
  const float* vh = v + (b * g.kv_heads + kvh) * g.d;
  const Span span = has_row ? key_span(g, b, i) : Span{0, 0};  // empty for a row that sees no key
  const Span block = block_key_span(g, b, blk.r0);
  for (int64_t x = lane; x < g.d; x += kWarp) {
    qs[x] = has_row ? q[off + x] : 0.0f;
    dos[x] = has_row ? dout[off + x] : 0.0f;
    acc[x] = 0.0f;
  }
  const float lse_i = has_row ? lse[row] : 0.0f, D_i = has_row ? D[row] : 0.0f;
  const PhiloxStream rng(g.drop.seed, g.drop.stream);
  for (int64_t j0 = block.lo; j0 < block.hi; j0 += kTile) {
    __syncthreads();
    load_tile(ks, kh, g.kv_stride, j0, block.hi, g.d);
    load_tile(vs, vh, g.kv_stride, j0, block.hi, g.d);
    __syncthreads();
    if (!has_row || !tile_meets(span, j0)) continue;
    const int64_t j = j0 + lane;
    float ds = 0.0f;
    if (j >= span.lo && j < span.hi && key_kept(g, b, j))
      ds = prob_grad(g, rng, qs, dos, ks + lane * ld, vs + lane * ld, lse_i, D_i, b, h, i, j).ds;
    const int n = static_cast<int>(std::min<int64_t>(kTile, block.hi - j0));
    add_weighted_rows(acc, ds, ks, ld, n, g.d);
  }
  if (has_row)
    for (int64_t x = lane; x < g.d; x += kWarp) dq[off + x] = acc[x];
}

// dK, dV: dkdv_kernel per warp (one key row each) over tiles of the query rows, dO rows, lse and D of
// every head of the group, shared by the block's key rows of one (batch, kv head). Shared: Q tile, dO
// tile, the tile's lse and D, the warps' dK and dV accumulators. The warp's own K and V rows are read
// from global memory: every lane reads the same address (one broadcast load, cached).
__global__ void dkdv_tiled_kernel(Geometry g, const float* q, const float* k, const float* v, const float* lse,
                                  const float* dout, const float* D, float* dk, float* dv) {
  extern __shared__ float tile_shared[];
  const int64_t ld = tile_ld(g.d);
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = lane_id();
  float* qs = tile_shared;
  float* dos = qs + kTile * ld;
  float* dk_acc = dos + kTile * ld + warp * g.d;
  float* dv_acc = dos + kTile * ld + (kTileRows + warp) * g.d;
  float* lses = dos + kTile * ld + 2 * kTileRows * g.d;
  float* Ds = lses + kTile;
  const TileBlock blk = tile_block(g.kv_seq);  // blk.bh = b * kv_heads + kvh
  const int64_t b = blk.bh / g.kv_heads, kvh = blk.bh % g.kv_heads, j = blk.r0 + warp;
  const bool has_row = j < g.kv_seq;
  const bool adds = has_row && key_kept(g, b, j);  // padding: no query sees it
  const int64_t kv_off = j * g.kv_stride + blk.bh * g.d;
  for (int64_t x = lane; x < g.d; x += kWarp) dk_acc[x] = dv_acc[x] = 0.0f;
  // The query rows that may see key j: causal, those at or after it (the block's first key bounds them
  // all); with a document mask, those whose document starts at or before j, checked per row.
  const int64_t i_lo = g.causal ? std::max<int64_t>(0, j - g.offset) : 0;
  const int64_t block_i_lo = g.causal ? std::max<int64_t>(0, blk.r0 - g.offset) : 0;
  const PhiloxStream rng(g.drop.seed, g.drop.stream);
  for (int64_t gi = 0; gi < g.group; ++gi) {
    const int64_t h = kvh * g.group + gi, bh = b * g.heads + h;
    for (int64_t i0 = block_i_lo; i0 < g.seq; i0 += kTile) {
      __syncthreads();
      load_tile(qs, q + bh * g.d, g.q_stride, i0, g.seq, g.d);
      load_tile(dos, dout + bh * g.d, g.q_stride, i0, g.seq, g.d);
      if (threadIdx.x < kTile) {
        const int64_t r = i0 + threadIdx.x;
        lses[threadIdx.x] = r < g.seq ? lse[bh * g.seq + r] : 0.0f;
        Ds[threadIdx.x] = r < g.seq ? D[bh * g.seq + r] : 0.0f;
      }
      __syncthreads();
      if (!adds || i0 + kTile <= i_lo) continue;  // warp-uniform
      const int64_t i = i0 + lane;
      Grad gr{0.0f, 0.0f};
      if (i >= i_lo && i < g.seq && (g.doc == nullptr || g.doc[b * g.seq + i] <= j))
        gr = prob_grad(g, rng, qs + lane * ld, dos + lane * ld, k + kv_off, v + kv_off, lses[lane], Ds[lane], b, h, i,
                       j);
      const int n = static_cast<int>(std::min<int64_t>(kTile, g.seq - i0));
      add_weighted_rows(dv_acc, gr.pz, dos, ld, n, g.d);
      add_weighted_rows(dk_acc, gr.ds, qs, ld, n, g.d);
    }
  }
  if (has_row)
    for (int64_t x = lane; x < g.d; x += kWarp) {
      dk[kv_off + x] = dk_acc[x];
      dv[kv_off + x] = dv_acc[x];
    }
}

__global__ void block_doc_start_kernel(const int32_t* doc, int64_t batch, int64_t n, int64_t column, int64_t width,
                                       int64_t first_key, int32_t* out) {
  for (int64_t e = grid_index(); e < batch * width; e += grid_stride()) {
    const int64_t b = e / width, r = e % width;
    const int64_t x = doc[b * n + column + r] - first_key;
    out[e] = static_cast<int32_t>(x < 0 ? 0 : x > width ? width : x);
  }
}

// Blocks of kThreads for one warp per each of `warps` rows.
unsigned blocks_for_warps(int64_t warps) {
  constexpr int64_t per_block = kThreads / kWarp;
  return static_cast<unsigned>((warps + per_block - 1) / per_block);
}

// Blocks for the tiled kernels: kTileRows rows of each of `heads` (batch, head) pairs of `rows` rows.
unsigned tiled_blocks(int64_t heads, int64_t rows) {
  return static_cast<unsigned>(heads * ((rows + kTileRows - 1) / kTileRows));
}

}  // namespace

namespace {
// -1: not chosen yet (the environment decides at the first call).
std::atomic<int> g_kernels{-1};

bool tiled() { return attention_kernels() == AttentionKernels::kTiled; }
}  // namespace

AttentionKernels attention_kernels() {
  int k = g_kernels.load();
  if (k < 0) {
    const char* env = std::getenv("TESSERA_CUDA_ATTENTION");
    const std::string v = env ? env : "tiled";
    TESSERA_CHECK(v == "rows" || v == "tiled", "TESSERA_CUDA_ATTENTION='", v, "' must be rows or tiled");
    k = static_cast<int>(v == "tiled" ? AttentionKernels::kTiled : AttentionKernels::kRowPerWarp);
    g_kernels.store(k);
  }
  return static_cast<AttentionKernels>(k);
}

void set_attention_kernels(AttentionKernels kernels) { g_kernels.store(static_cast<int>(kernels)); }

void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       const AttentionShape& shape, float softmax_scale, const AttentionDropout& dropout) {
  const Geometry g = checked_geometry(shape, softmax_scale, dropout);
  const int64_t rows = g.batch * g.heads * g.seq;
  if (rows == 0) return;
  // The tiled kernel where chosen (attention_kernels()) and its tiles fit in the default shared memory
  // (head_dim up to 153; 152 for dK/dV, 139 for dQ), else the row-per-warp one.
  const size_t shared = tile_shared_bytes(g.d, 2, 0);
  if (tiled() && shared <= kMaxTileShared) {
    const unsigned blocks = tiled_blocks(g.batch * g.heads, g.seq);
    forward_tiled_kernel<<<blocks, kTileThreads, shared>>>(g, q, k, v, out, lse);
  } else {
    forward_kernel<<<blocks_for_warps(rows), kThreads>>>(g, q, k, v, out, lse);
  }
  check_launch("attention_forward");
}

void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv, const AttentionShape& shape,
                        float softmax_scale, const AttentionDropout& dropout, int device) {
  const Geometry g = checked_geometry(shape, softmax_scale, dropout);
  const int64_t rows = g.batch * g.heads * g.seq, key_rows = g.batch * g.kv_heads * g.kv_seq;
  if (rows == 0 && key_rows == 0) return;
  // D per query row, from the device's caching allocator (stream-ordered: freed once the kernels that
  // read it are queued).
  Allocator& allocator = allocator_for(Device{DeviceType::CUDA, device});
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(rows, 1)) * sizeof(float);
  float* D = static_cast<float*>(allocator.allocate(bytes, 256));
  try {
    if (rows > 0) {
      row_dot_kernel<<<grid_for(rows), kThreads>>>(g, out, dout, D);
      check_launch("attention_backward");
      const size_t shared = tile_shared_bytes(g.d, 3, 0);
      if (tiled() && shared <= kMaxTileShared) {
        const unsigned blocks = tiled_blocks(g.batch * g.heads, g.seq);
        dq_tiled_kernel<<<blocks, kTileThreads, shared>>>(g, q, k, v, lse, dout, D, dq);
      } else {
        dq_kernel<<<blocks_for_warps(rows), kThreads>>>(g, q, k, v, lse, dout, D, dq);
      }
      check_launch("attention_backward");
    }
    if (key_rows > 0) {  // rows == 0 (no queries): every key's gradient is zero
      const size_t shared = tile_shared_bytes(g.d, 2, 2 * kTile);
      if (tiled() && shared <= kMaxTileShared) {
        const unsigned blocks = tiled_blocks(g.batch * g.kv_heads, g.kv_seq);
        dkdv_tiled_kernel<<<blocks, kTileThreads, shared>>>(g, q, k, v, lse, dout, D, dk, dv);
      } else {
        dkdv_kernel<<<blocks_for_warps(key_rows), kThreads>>>(g, q, k, v, lse, dout, D, dk, dv);
      }
      check_launch("attention_backward");
    }
  } catch (...) {
    allocator.deallocate(D, bytes);
    throw;
  }
  allocator.deallocate(D, bytes);
}

void block_doc_start(const int32_t* doc, int64_t batch, int64_t n, int64_t column, int64_t width, int64_t first_key,
                     int32_t* out) {
  if (batch * width == 0) return;
  block_doc_start_kernel<<<grid_for(batch * width), kThreads>>>(doc, batch, n, column, width, first_key, out);
  check_launch("block_doc_start");
}

}  // namespace tessera::kernels::cuda
