// Causal or bidirectional self-attention, fp32, as tiled online softmax (FlashAttention-2, Dao 2023) on the CPU.
//
// Forward: each work item is one (batch, head, query tile). It walks the key tiles up to the diagonal
// and keeps, per query row, the running max m, the running sum l of exp(s - m) and an unnormalised
// output accumulator, rescaling both by exp(m_old - m_new) whenever the max grows. Only the row's
// log-sum-exp m + log(l) is saved. Backward recomputes P = exp(s - lse) tile by tile from it.
//
// Every tile product is a small register-blocked GEMM (`tile::gemm`, tile_gemm.h) whose B operand is
// read by rows, so score tiles are formed against a transposed copy of one operand (the query tile in
// forward, the key and value tiles in backward), transposed once and reused across a whole row or
// column of tiles. Masked probabilities are exact zeros, so the products run over whole tiles (the
// diagonal tile included) instead of a different length per row.
//
// Dropout on the probabilities (as torch applies it to the softmax output) uses a Philox mask keyed
// by global coordinates (see attention.h), regenerated in backward rather than stored.
//
// The document mask (doc_start) narrows row i to keys [doc_start_i, i]. Since doc_start is
// non-decreasing, a query tile needs no key tile below its first row's doc_start, and a key tile is
// needed by a prefix of the query tiles at or below the diagonal; in the tiles that straddle a
// document boundary the scores left of doc_start_i are masked with -inf like those above the diagonal.
//
// Bidirectional attention (BERT) runs every query tile against every key tile up to the sample's last
// valid key; in a tile holding padding the padded keys' scores are -inf for every row.
//
// With more keys than queries (AttentionShape::kv_seq) the queries are the last rows of the keys' span:
// query r is at position offset + r (offset = kv_seq - seq), and causal masking is by that position. The
// query tiles are then not aligned with the key tiles: every key tile past a tile's first query position
// is masked per row, and a row that sees none of a tile's keys is handled as a document mask's is.
#include "kernels/cpu/attention.h"
#include "kernels/cpu/tile_gemm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/philox.h"
#include "core/profiler.h"
#include "core/progress.h"
#include "kernels/math/dropout.h"
#include "kernels/math/softmax.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {
namespace {

// Query rows and key columns per tile: a transposed 64-row tile of head_dim 64 is 16 KiB, which stays
// in L1 while the other operand streams.
constexpr int64_t kTile = 64;

// Copies n rows of one head (row t at src + t * stride, d floats) into dst as a [d, kTile] matrix,
// times `scale`, zero in the columns past n: the B operand of a tile product, read by rows.
void transpose_tile(const float* src, int64_t stride, int64_t n, int64_t d, float scale, float* dst) {
  std::fill(dst, dst + d * kTile, 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t x = 0; x < d; ++x) dst[x * kTile + t] = src[t * stride + x] * scale;
}

// The dropout mask of one query row: factor[t] = 1/(1-p) where Philox element start + t is kept,
// 0 where dropped, 0 for t in [n, kTile); n <= kTile. One Philox block gives four consecutive
// elements, so whole blocks are generated and the window is copied out; the keep test is written as a
// multiply rather than a branch, which would mispredict on every random drop.
void dropout_factors(const PhiloxStream& rng, uint64_t start, int64_t n, float p, float keep_scale,
                     float* factor) {
  float buf[kTile + 8];
  const uint64_t first = start >> 2;
  const int64_t skip = static_cast<int64_t>(start & 3), blocks = (skip + n + 3) / 4;
  for (int64_t k = 0; k < blocks; ++k) {
    const Philox4x32::Block blk = rng.block(first + static_cast<uint64_t>(k));
    for (int w = 0; w < 4; ++w)
      buf[4 * k + w] = keep_scale * static_cast<float>(math::dropout_keeps(blk.v[w], p));
  }
  std::copy(buf + skip, buf + skip + n, factor);
  std::fill(factor + n, factor + kTile, 0.0f);
}

// Geometry shared by forward and backward.
struct Plan {
  int64_t seq, batch, heads, kv_heads, d, group;
  int64_t kv_seq, offset;  // keys, and the position of query 0 among them (kv_seq - seq)
  int64_t mask_seq;        // the sequence length dropout is keyed by (AttentionDropout::seq)
  int64_t query_offset = 0, key_offset = 0;  // AttentionDropout's: added to the rows' and keys' positions
  int64_t q_stride, kv_stride;  // floats between consecutive positions of one (batch, head)
  int64_t tiles;
  bool dropout;
  float p, keep_scale;
  const int32_t* doc;  // doc_start or nullptr
  bool causal;
  const int32_t* key_valid;  // bidirectional padding mask or nullptr
  // Bidirectional: per sample, one past its last valid key, and per (sample, key tile) whether the tile
  // holds a padded key.
  std::vector<int64_t> key_end;
  std::vector<uint8_t> tile_padded;

  Plan(const AttentionShape& s, const AttentionDropout& drop)
      : seq(s.seq), batch(s.batch), heads(s.heads), kv_heads(s.kv_heads), d(s.head_dim) {
    TESSERA_CHECK(seq >= 0 && batch >= 0, "attention: negative seq ", seq, " or batch ", batch);
    kv_seq = s.kv_seq > 0 ? s.kv_seq : seq;
    offset = kv_seq - seq;
    mask_seq = drop.seq > 0 ? drop.seq : kv_seq;
    TESSERA_CHECK(offset >= 0, "attention: kv_seq ", kv_seq, " is shorter than the ", seq, " queries");
    TESSERA_CHECK(offset == 0 || (s.causal && s.doc_start == nullptr), "attention: kv_seq ", kv_seq, " != seq ", seq,
                  " needs causal attention without a document mask");
    TESSERA_CHECK(drop.query_offset >= 0 && drop.key_offset >= 0 && mask_seq >= drop.key_offset + kv_seq &&
                      mask_seq >= drop.query_offset + kv_seq,
                  "attention: dropout keyed by a sequence of ", mask_seq, " shorter than the ", kv_seq,
                  " keys at offset ", drop.key_offset, " (queries at offset ", drop.query_offset, ")");
    query_offset = drop.query_offset;
    key_offset = drop.key_offset;
    TESSERA_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, "attention: heads ", heads,
                  " must be a positive multiple of kv_heads ", kv_heads);
    TESSERA_CHECK(d > 0, "attention: head_dim must be positive, got ", d);
    TESSERA_CHECK(drop.p >= 0.0f && drop.p < 1.0f, "attention: dropout p must be in [0, 1), got ", drop.p);
    group = heads / kv_heads;
    q_stride = batch * heads * d;
    kv_stride = batch * kv_heads * d;
    tiles = (seq + kTile - 1) / kTile;
    dropout = drop.p > 0.0f;
    p = drop.p;
    keep_scale = dropout ? 1.0f / (1.0f - drop.p) : 1.0f;
    doc = s.doc_start;
    causal = s.causal;
    key_valid = s.key_valid;
    TESSERA_CHECK(!(causal && s.bidirectional_doc_start), "attention: bidirectional_doc_start with causal attention");
    TESSERA_CHECK(causal || doc == nullptr || s.bidirectional_doc_start,
                  "attention: a document mask needs causal attention (or bidirectional_doc_start)");
    TESSERA_CHECK(doc == nullptr || key_valid == nullptr, "attention: a document mask and a padding mask at once");
    TESSERA_CHECK(!causal || key_valid == nullptr, "attention: a padding mask needs bidirectional attention");
    if (!causal) {
      key_end.assign(batch, seq);
      tile_padded.assign(batch * tiles, 0);
      for (int64_t b = 0; key_valid != nullptr && b < batch; ++b) {
        const int32_t* kv = key_valid + b * seq;
        int64_t end = 0;
        for (int64_t j = 0; j < seq; ++j) {
          if (kv[j] != 0) end = j + 1;
          else tile_padded[b * tiles + j / kTile] = 1;
        }
        TESSERA_CHECK(end > 0 || seq == 0, "attention: the padding mask of sample ", b, " hides every key");
        key_end[b] = end;
      }
    }
    if (doc != nullptr)  // O(batch * seq), negligible next to the attention itself
      for (int64_t b = 0; b < batch; ++b) {
        const int32_t* ds = doc + b * seq;
        for (int64_t i = 0; i < seq; ++i) {
          const int64_t last = causal ? i : seq;  // bidirectional: seq is a row that sees no key
          TESSERA_CHECK(ds[i] >= (i == 0 ? 0 : ds[i - 1]) && ds[i] <= last, "attention: doc_start of sample ", b,
                        " position ", i, " is ", ds[i], "; it must lie in [", i == 0 ? 0 : ds[i - 1], ", ", last,
                        "] (at most ", causal ? "i" : "seq", ", never below the previous position's, never negative)");
        }
      }
    if (dropout)
      TESSERA_CHECK(drop.head_offset >= 0 && drop.sample_offset >= 0 && drop.head_offset + heads <= drop.total_heads,
                    "attention: dropout heads [", drop.head_offset, ", ", drop.head_offset + heads,
                    ") do not fit in total_heads ", drop.total_heads);
  }

  // First key that query i of sample b may see.
  int64_t doc_start(int64_t b, int64_t i) const { return doc == nullptr ? 0 : doc[b * seq + i]; }
  // Bidirectional: whether key tile j0 of sample b holds padding, and whether key j is padding.
  bool padded_tile(int64_t b, int64_t j0) const { return !causal && tile_padded[b * tiles + j0 / kTile] != 0; }
  bool padded_key(int64_t b, int64_t j) const { return key_valid[b * seq + j] == 0; }

};

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       const AttentionShape& shape, float softmax_scale, const AttentionDropout& dropout) {
  TESSERA_PROFILE_SCOPE("attention_forward");
  progress::poll();
  const Plan plan(shape, dropout);
  const int64_t d = plan.d;
  const PhiloxStream rng(dropout.seed, dropout.stream);
  const int64_t items = plan.batch * plan.heads * plan.tiles;

#pragma omp parallel if (parallel : parallel_worth(plan.batch * plan.heads * plan.seq * plan.kv_seq * d))
  {
    // Per-thread scratch, allocated once per call rather than per tile. The scores are kept transposed,
    // st[j * kTile + r] for key j and query row r, so that the softmax statistics of the 64 query rows
    // (max, sum, rescale) are element-wise vector operations down the key axis, with no horizontal
    // reductions; the query tile is transposed once per work item for that.
    std::vector<float> qt(d * kTile), st(kTile * kTile), acc(kTile * d), factor(kTile);
    std::vector<float> m(kTile), l(kTile), m_new(kTile), alpha(kTile);

#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      // Causal tiles near the end of the sequence see the most keys: hand those out first.
      const int64_t tile = plan.tiles - 1 - item % plan.tiles, bh = item / plan.tiles;
      const int64_t b = bh / plan.heads, h = bh % plan.heads, kvh = h / plan.group;
      const int64_t i0 = tile * kTile, rows = std::min(kTile, plan.seq - i0);
      const int64_t g0 = plan.offset + i0;  // the first row's position among the keys
      const float* kh = k + (b * plan.kv_heads + kvh) * d;  // position j of this kv head at kh + j * kv_stride
      const float* vh = v + (b * plan.kv_heads + kvh) * d;

      transpose_tile(q + i0 * plan.q_stride + (b * plan.heads + h) * d, plan.q_stride, rows, d, softmax_scale,
                     qt.data());
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
      std::fill(l.begin(), l.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);

      // Key tiles from the one holding the first row's doc_start (the smallest in the tile, 0 without a
      // document mask) up to the one holding the last row's position. With as many keys as queries the
      // tiles are aligned (j0, i0 multiples of kTile), so the last one is the diagonal tile j0 == i0.
      // Without a document mask every query row sees at least its first key in every tile up to its
      // first row's position; with one, a row whose document starts past this tile sees none of it, as
      // does a row before a tile that starts past the first row's position (more keys than queries).
      // Bidirectional: every key tile up to the one holding the sample's last valid key, from the one
      // holding the first row's first key under bidirectional_doc_start (a row whose first key is past
      // every key sees none, l = 0: see the end of the item).
      const int64_t doc_first = plan.doc_start(b, i0), doc_last = plan.doc_start(b, i0 + rows - 1);
      const int64_t j_first = doc_first / kTile * kTile;  // 0 without a document mask
      const int64_t j_last = plan.causal ? (g0 + rows - 1) / kTile * kTile : (plan.key_end[b] - 1) / kTile * kTile;
      for (int64_t j0 = j_first; j0 <= j_last; j0 += kTile) {
        const int64_t cols = std::min(kTile, plan.kv_seq - j0);
        float* s = st.data();
        // st = scale * K_tile Q^T: [cols, kTile]
        tile::gemm(s, kTile, {kh + j0 * plan.kv_stride, plan.kv_stride, 1}, qt.data(), kTile, cols, d, kTile, false);
        if (plan.causal && j0 + cols - 1 > g0)
          for (int64_t j = 0; j < cols; ++j)  // causal: rows r with g0 + r < j0 + j
            std::fill(s + j * kTile, s + j * kTile + std::clamp<int64_t>(j0 + j - g0, 0, kTile),
                      -std::numeric_limits<float>::infinity());
        // Some row's document starts inside or past this tile, some row comes before all its keys, or
        // some key of it is padding.
        const bool straddles = doc_last > j0 || (plan.causal ? j0 > g0 : plan.padded_tile(b, j0));
        if (straddles && plan.doc != nullptr)
          for (int64_t r = 0; r < rows; ++r) {  // document: keys j < doc_start of row r
            const int64_t masked = std::min(cols, plan.doc_start(b, i0 + r) - j0);
            for (int64_t j = 0; j < masked; ++j) s[j * kTile + r] = -std::numeric_limits<float>::infinity();
          }
        if (plan.padded_tile(b, j0))
          for (int64_t j = 0; j < cols; ++j)  // padding: the key's column, for every row
            if (plan.padded_key(b, j0 + j))
              std::fill(s + j * kTile, s + (j + 1) * kTile, -std::numeric_limits<float>::infinity());
        // Online softmax: raise each row's running max and rescale what was summed under the old one.
        std::copy(m.begin(), m.end(), m_new.begin());
        for (int64_t j = 0; j < cols; ++j)
          for (int64_t r = 0; r < kTile; ++r) m_new[r] = std::max(m_new[r], s[j * kTile + r]);
        if (!straddles) {
          for (int64_t r = 0; r < kTile; ++r) {
            alpha[r] = math::softmax_rescale(m[r], m_new[r]);  // 0 on the first tile (m = -inf)
            l[r] *= alpha[r];
            m[r] = m_new[r];
          }
        } else {  // a row that has seen no key yet keeps m = -inf; shift it by 0 so exp gives 0, not NaN
          for (int64_t r = 0; r < kTile; ++r) {
            const float shift = math::softmax_safe_shift(m_new[r]);
            alpha[r] = math::softmax_rescale(m[r], shift);
            l[r] *= alpha[r];
            m[r] = m_new[r];
            m_new[r] = shift;
          }
        }
        const float* shift = straddles ? m_new.data() : m.data();
        for (int64_t j = 0; j < cols; ++j)
          for (int64_t r = 0; r < kTile; ++r) {
            s[j * kTile + r] = math::softmax_weight(s[j * kTile + r], shift[r]);
            l[r] += s[j * kTile + r];  // the normaliser sums the undropped weights ...
          }
        for (int64_t r = 0; r < rows; ++r) {
          // The weights of masked keys (before doc_start, past the diagonal) are exactly 0 here, so the
          // product below may run over the whole tile.
          if (plan.dropout) {  // ... while the output sums the dropped ones
            const int64_t visible = plan.causal ? std::clamp<int64_t>(g0 + r + 1 - j0, 0, cols) : cols;
            dropout_factors(rng,
                            math::attention_dropout_row(dropout, plan.mask_seq, b, h, plan.query_offset + g0 + r) +
                                plan.key_offset + j0,
                            visible, plan.p, plan.keep_scale, factor.data());
            for (int64_t j = 0; j < cols; ++j) s[j * kTile + r] *= factor[j];
          }
          float* a = acc.data() + r * d;
          for (int64_t x = 0; x < d; ++x) a[x] *= alpha[r];
        }
        // acc += P V_tile, with P[r, j] = st[j, r].
        tile::gemm(acc.data(), d, {s, 1, kTile}, vh + j0 * plan.kv_stride, plan.kv_stride, rows, cols, d, true);
      }

      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        float* o = out + i * plan.q_stride + (b * plan.heads + h) * d;
        float* lse_i = lse + (b * plan.heads + h) * plan.seq + i;
        if (l[r] == 0.0f) {  // bidirectional_doc_start: a row whose document starts past every key
          std::fill(o, o + d, 0.0f);
          *lse_i = -std::numeric_limits<float>::infinity();
          continue;
        }
        const float inv_l = 1.0f / l[r];
        for (int64_t x = 0; x < d; ++x) o[x] = acc[r * d + x] * inv_l;
        *lse_i = math::softmax_lse(m[r], l[r]);
      }
    }
  }
}

// FlashAttention-2 backward, with P = exp(s - lse), Z = mask / (1 - p) (1 without dropout):
//   dV = (P o Z)^T dO,  dP = (dO V^T) o Z,  dS = P o (dP - D),  dQ = scale dS K,  dK = scale dS^T Q,
// where D_i = dO_i . O_i = sum_j P_ij dP_ij (O already carries the dropout, so this holds with it too).
//
// A work item is one (batch, kv head): it alone writes that kv head's dK, dV and the dQ of the query
// heads in its group, and it sums over key tiles, heads and query tiles in a fixed order, so the
// result is bitwise the same whatever the thread count, with no atomics and no partial buffers.
void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv, const AttentionShape& shape,
                        float softmax_scale, const AttentionDropout& dropout) {
  TESSERA_PROFILE_SCOPE("attention_backward");
  progress::poll();
  const Plan plan(shape, dropout);
  const int64_t d = plan.d;
  const PhiloxStream rng(dropout.seed, dropout.stream);
  const int64_t items = plan.batch * plan.kv_heads;

#pragma omp parallel if (parallel : parallel_worth(2 * plan.batch * plan.heads * plan.seq * plan.kv_seq * d))
  {
    std::vector<float> kt(d * kTile), vt(d * kTile), dk_acc(kTile * d), dv_acc(kTile * d);
    std::vector<float> pz(kTile * kTile), ds(kTile * kTile), dp(kTile * kTile), factor(kTile);
    std::vector<float> D(plan.group * plan.seq);

#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t b = item / plan.kv_heads, kvh = item % plan.kv_heads;
      const int64_t kv_off = (b * plan.kv_heads + kvh) * d;
      const float* kh = k + kv_off;
      const float* vh = v + kv_off;

      // dQ rows are accumulated over key tiles, so start them at zero; D once per query row.
      for (int64_t g = 0; g < plan.group; ++g) {
        const int64_t off = (b * plan.heads + kvh * plan.group + g) * d;
        for (int64_t i = 0; i < plan.seq; ++i) {
          const float* o = out + i * plan.q_stride + off;
          const float* go = dout + i * plan.q_stride + off;
          float sum = 0.0f;
          for (int64_t x = 0; x < d; ++x) sum += go[x] * o[x];
          D[g * plan.seq + i] = sum;
          std::fill(dq + i * plan.q_stride + off, dq + i * plan.q_stride + off + d, 0.0f);
        }
      }

      for (int64_t j0 = 0; j0 < plan.kv_seq; j0 += kTile) {
        const int64_t cols = std::min(kTile, plan.kv_seq - j0);
        // Transposed key (pre-scaled) and value tiles, built once and reused by every query tile and head.
        transpose_tile(kh + j0 * plan.kv_stride, plan.kv_stride, cols, d, softmax_scale, kt.data());
        transpose_tile(vh + j0 * plan.kv_stride, plan.kv_stride, cols, d, 1.0f, vt.data());
        std::fill(dk_acc.begin(), dk_acc.end(), 0.0f);
        std::fill(dv_acc.begin(), dv_acc.end(), 0.0f);
        // Bidirectional: key tiles past the sample's last valid key get zero gradients.
        const bool seen = plan.causal || j0 < plan.key_end[b];
        const bool padded = plan.padded_tile(b, j0);

        for (int64_t g = 0; seen && g < plan.group; ++g) {
          const int64_t h = kvh * plan.group + g, off = (b * plan.heads + h) * d;
          const float* qh = q + off;
          const float* goh = dout + off;
          const float* lse_h = lse + (b * plan.heads + h) * plan.seq;
          const float* D_h = D.data() + g * plan.seq;

          // Query tiles from the one holding position j0 (on or below the diagonal), up to the first whose
          // documents all start past this key tile (doc_start is non-decreasing, so all later ones do too).
          // Bidirectional: every query tile.
          const int64_t i_first = plan.causal ? std::max<int64_t>(0, j0 - plan.offset) / kTile * kTile : 0;
          for (int64_t i0 = i_first; i0 < plan.seq && plan.doc_start(b, i0) < j0 + cols; i0 += kTile) {
            const int64_t rows = std::min(kTile, plan.seq - i0);
            // Rows [0, live) see some key of this tile; the rest (a suffix) see none and are skipped.
            int64_t live = rows;
            if (plan.doc != nullptr)
              live = std::lower_bound(plan.doc + b * plan.seq + i0, plan.doc + b * plan.seq + i0 + rows, j0 + cols) -
                     (plan.doc + b * plan.seq + i0);
            if (live == 0) continue;
            // Recompute the scaled scores S = Q K^T and dP = dO V^T of this tile, [live, kTile] each
            // (the transposed tiles are zero past `cols`).
            const float* q_tile = qh + i0 * plan.q_stride;
            const float* go_tile = goh + i0 * plan.q_stride;
            tile::gemm(pz.data(), kTile, {q_tile, plan.q_stride, 1}, kt.data(), kTile, live, d, kTile, false);
            tile::gemm(dp.data(), kTile, {go_tile, plan.q_stride, 1}, vt.data(), kTile, live, d, kTile, false);
            for (int64_t r = 0; r < live; ++r) {
              const int64_t i = i0 + r, g = plan.offset + i;  // g: the row's position among the keys
              // Causal: keys j <= g. With more keys than queries a row before this tile sees none of it.
              const int64_t valid = plan.causal ? std::min(cols, g + 1 - j0) : cols;
              float* pz_r = pz.data() + r * kTile;
              float* ds_r = ds.data() + r * kTile;
              const float* dp_r = dp.data() + r * kTile;
              if (valid <= 0) {
                std::fill(pz_r, pz_r + kTile, 0.0f);
                std::fill(ds_r, ds_r + kTile, 0.0f);
                continue;
              }
              // Keys j < first precede the document of row i; first < cols since r < live, and first <= i - j0.
              const int64_t first = std::max<int64_t>(0, plan.doc_start(b, i) - j0);
              std::fill(pz_r, pz_r + first, -std::numeric_limits<float>::infinity());  // document: P = 0
              if (padded)
                for (int64_t j = 0; j < cols; ++j)  // padding: P = 0
                  if (plan.padded_key(b, j0 + j)) pz_r[j] = -std::numeric_limits<float>::infinity();
              if (plan.dropout) {
                dropout_factors(rng,
                                math::attention_dropout_row(dropout, plan.mask_seq, b, h, plan.query_offset + g) +
                                    plan.key_offset + j0,
                                valid, plan.p, plan.keep_scale, factor.data());
              } else {  // the factor doubles as the causal mask
                std::fill(factor.begin(), factor.begin() + valid, 1.0f);
                std::fill(factor.begin() + valid, factor.end(), 0.0f);
              }
              const float lse_i = lse_h[i], D_i = D_h[i];
              for (int64_t j = 0; j < kTile; ++j) {
                const float prob = math::softmax_weight(pz_r[j], lse_i);
                pz_r[j] = prob * factor[j];                                    // P o Z, for dV
                ds_r[j] = softmax_scale * prob * (dp_r[j] * factor[j] - D_i);  // scale folded in for dQ, dK
              }
              // Masked: P = 0. Exact zeros, so the products below may run over the whole tile.
              std::fill(pz_r + valid, pz_r + kTile, 0.0f);
              std::fill(ds_r + valid, ds_r + kTile, 0.0f);
            }
            // dQ_i += dS_i K_tile;  dV_j += sum_i PZ_ij dO_i;  dK_j += sum_i dS_ij Q_i (rows i of this tile
            // that see some key of it; the others are not in pz and ds).
            tile::gemm(dq + i0 * plan.q_stride + off, plan.q_stride, {ds.data(), kTile, 1}, kh + j0 * plan.kv_stride,
                       plan.kv_stride, live, cols, d, true);
            tile::gemm(dv_acc.data(), d, {pz.data(), 1, kTile}, go_tile, plan.q_stride, cols, live, d, true);
            tile::gemm(dk_acc.data(), d, {ds.data(), 1, kTile}, q_tile, plan.q_stride, cols, live, d, true);
          }
        }

        for (int64_t j = 0; j < cols; ++j) {
          std::memcpy(dk + (j0 + j) * plan.kv_stride + kv_off, dk_acc.data() + j * d, d * sizeof(float));
          std::memcpy(dv + (j0 + j) * plan.kv_stride + kv_off, dv_acc.data() + j * d, d * sizeof(float));
        }
      }
    }
  }
}

void block_doc_start(const int32_t* doc, int64_t batch, int64_t n, int64_t column, int64_t width, int64_t first_key,
                     int32_t* out) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < width; ++r)
      out[b * width + r] = static_cast<int32_t>(std::clamp<int64_t>(doc[b * n + column + r] - first_key, 0, width));
}

}  // namespace tessera::kernels::cpu
