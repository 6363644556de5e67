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
// (attention_tiled.cu)
// (opt-in until the device check has run them) put 8 rows of one (batch, head) in
// a block and load each tile of 32 keys (dK/dV: queries) into shared memory once for the block, so K and
// V (Q and dO) are read from global memory once per 8 rows, coalesced, rather than once per row with each
// lane on its own row; the row-per-warp kernels, which read them straight from global memory, remain for
// head dims whose tiles exceed the 48 KiB of shared memory a block gets by default (dQ past 139, the
// others past 152).
//
// TESSERA_CUDA_ATTENTION=gemm or gemm_bf16 sends both calls, once the checks below have passed, to the
// batched-GEMM attention instead (kernels/cuda/attention_gemm.h); cudnn to cuDNN's fused attention
// (kernels/cuda/cudnn_sdpa.h).
//
// Dropout draws each probability's Philox element with the CPU's keying (kernels/math/dropout.h), so the
// masks are the same bits. The mask tensors are device data; they are copied to the host once per call
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "kernels/cuda/attention_device.cuh"
#include "kernels/cuda/attention_gemm.h"
#include "kernels/cuda/cudnn_sdpa.h"

namespace tessera::kernels::cuda {
using namespace attention_detail;
namespace {

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
    copy_and_wait(mask.data(), device_mask, mask.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
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

}  // namespace

namespace {
// -1: not chosen yet (the environment decides at the first call).
std::atomic<int> g_kernels{-1};

bool tiled() { return attention_kernels() == AttentionKernels::kTiled; }

// Whether the batched-GEMM kernels are chosen (kernels/cuda/attention_gemm.h), and their GEMM input type:
// F32 products for gemm, BF16 for gemm_bf16.
bool batched_gemm(DType* input) {
  const AttentionKernels k = attention_kernels();
  *input = k == AttentionKernels::kBatchedGemmBf16 ? DType::BF16 : DType::F32;
  return k == AttentionKernels::kBatchedGemm || k == AttentionKernels::kBatchedGemmBf16;
}
}  // namespace

AttentionKernels attention_kernels() {
  int k = g_kernels.load();
  if (k < 0) {
    const char* env = std::getenv("TESSERA_CUDA_ATTENTION");
    const std::string v = env ? env : "tiled";
    TESSERA_CHECK(v == "rows" || v == "tiled" || v == "gemm" || v == "gemm_bf16" || v == "cudnn",
                  "TESSERA_CUDA_ATTENTION='", v, "' must be rows, tiled, gemm, gemm_bf16 or cudnn");
    k = static_cast<int>(v == "tiled"       ? AttentionKernels::kTiled
                         : v == "rows"      ? AttentionKernels::kRowPerWarp
                         : v == "gemm"      ? AttentionKernels::kBatchedGemm
                         : v == "gemm_bf16" ? AttentionKernels::kBatchedGemmBf16
                                            : AttentionKernels::kCudnn);
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
  if (attention_kernels() == AttentionKernels::kCudnn)
    return attention_forward_cudnn(q, k, v, out, lse, shape, softmax_scale, dropout);
  if (DType input; batched_gemm(&input))
    return attention_forward_gemm(q, k, v, out, lse, shape, softmax_scale, dropout, input);
  // The tiled kernel where chosen (attention_kernels()) and its tiles fit in the default shared memory
  // (head_dim up to 153; 152 for dK/dV, 139 for dQ), else the row-per-warp one.
  if (!(tiled() && forward_tiled(g, q, k, v, out, lse)))
    forward_kernel<<<blocks_for_warps(rows), kThreads, 0, launch_stream()>>>(g, q, k, v, out, lse);
  check_launch("attention_forward");
}

void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv, const AttentionShape& shape,
                        float softmax_scale, const AttentionDropout& dropout, int device) {
  const Geometry g = checked_geometry(shape, softmax_scale, dropout);
  const int64_t rows = g.batch * g.heads * g.seq, key_rows = g.batch * g.kv_heads * g.kv_seq;
  if (rows == 0 && key_rows == 0) return;
  if (rows > 0 && attention_kernels() == AttentionKernels::kCudnn)
    return attention_backward_cudnn(q, k, v, out, lse, dout, dq, dk, dv, shape, softmax_scale, dropout, device);
  if (DType input; rows > 0 && batched_gemm(&input))
    return attention_backward_gemm(q, k, v, lse, dout, dq, dk, dv, shape, softmax_scale, dropout, input, device);
  // D per query row, from the device's caching allocator (stream-ordered: freed once the kernels that
  // read it are queued).
  Allocator& allocator = allocator_for(Device{DeviceType::CUDA, device});
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(rows, 1)) * sizeof(float);
  float* D = static_cast<float*>(allocator.allocate(bytes, 256));
  try {
    if (rows > 0) {
      row_dot_kernel<<<grid_for(rows), kThreads, 0, launch_stream()>>>(g, out, dout, D);
      check_launch("attention_backward");
      if (!(tiled() && dq_tiled(g, q, k, v, lse, dout, D, dq)))
        dq_kernel<<<blocks_for_warps(rows), kThreads, 0, launch_stream()>>>(g, q, k, v, lse, dout, D, dq);
      check_launch("attention_backward");
    }
    if (key_rows > 0) {  // rows == 0 (no queries): every key's gradient is zero
      if (!(tiled() && dkdv_tiled(g, q, k, v, lse, dout, D, dk, dv)))
        dkdv_kernel<<<blocks_for_warps(key_rows), kThreads, 0, launch_stream()>>>(g, q, k, v, lse, dout, D, dk, dv);
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
  block_doc_start_kernel<<<grid_for(batch * width), kThreads, 0, launch_stream()>>>(doc, batch, n, column, width,
                                                                                    first_key, out);
  check_launch("block_doc_start");
}

}  // namespace tessera::kernels::cuda