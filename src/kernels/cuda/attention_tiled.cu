// The tiled attention kernels (attention_device.cuh declares their launchers; attention.cu's head
// comment gives the scheme they share with the row-per-warp kernels).
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/attention_device.cuh"

namespace tessera::kernels::cuda::attention_detail {
namespace {

// The row-per-warp kernels (attention.cu) read every key (or query) row from global memory once per row
// that uses it, each lane a different row: uncoalesced, and the whole K/V of a head re-read by every query row. The tiled
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

// Blocks for the tiled kernels: kTileRows rows of each of `heads` (batch, head) pairs of `rows` rows.
unsigned tiled_blocks(int64_t heads, int64_t rows) {
  return static_cast<unsigned>(heads * ((rows + kTileRows - 1) / kTileRows));
}

}  // namespace

bool forward_tiled(const Geometry& g, const float* q, const float* k, const float* v, float* out, float* lse) {
  const size_t shared = tile_shared_bytes(g.d, 2, 0);  // head_dim up to 153
  if (shared > kMaxTileShared) return false;
  forward_tiled_kernel<<<tiled_blocks(g.batch * g.heads, g.seq), kTileThreads, shared, launch_stream()>>>(g, q, k, v,
                                                                                                          out, lse);
  return true;
}

bool dq_tiled(const Geometry& g, const float* q, const float* k, const float* v, const float* lse, const float* dout,
              const float* D, float* dq) {
  const size_t shared = tile_shared_bytes(g.d, 3, 0);  // head_dim up to 139
  if (shared > kMaxTileShared) return false;
  dq_tiled_kernel<<<tiled_blocks(g.batch * g.heads, g.seq), kTileThreads, shared, launch_stream()>>>(g, q, k, v, lse,
                                                                                                     dout, D, dq);
  return true;
}

bool dkdv_tiled(const Geometry& g, const float* q, const float* k, const float* v, const float* lse,
                const float* dout, const float* D, float* dk, float* dv) {
  const size_t shared = tile_shared_bytes(g.d, 2, 2 * kTile);  // head_dim up to 152
  if (shared > kMaxTileShared) return false;
  dkdv_tiled_kernel<<<tiled_blocks(g.batch * g.kv_heads, g.kv_seq), kTileThreads, shared, launch_stream()>>>(
      g, q, k, v, lse, dout, D, dk, dv);
  return true;
}

}  // namespace tessera::kernels::cuda::attention_detail
