#include "kernels/cpu/packed_linear.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/profiler.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {
namespace {

// 16 floats: one AVX-512 register, two AVX2 ones (GCC's vector extension lowers it to what -march has).
typedef float v16 __attribute__((vector_size(64)));
constexpr int64_t kPrefetchK = 32;  // k steps of 128 bytes: 4 KB

inline v16 load(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Rows [0, MT) of x against k in [k0, k1) of one packed block: 2 * MT accumulators of 16 outputs, each
// weight vector loaded once for the MT rows and each x[i, k] broadcast (MT up to 8 keeps 16 accumulators
// in registers). The sums so far wait in `partial` ([MT, 32]) between pieces of k, as fp32 values, so
// splitting k changes no bit; the last piece adds the bias and stores the block's `cols` outputs in y.
template <int MT>
void block_rows(const float* x, const float* block, const float* b, float* y, float* partial, int64_t in, int64_t out,
                int64_t cols, int64_t k0, int64_t k1) {
  v16 acc[MT][2] = {};
  if (k0 > 0)
    for (int i = 0; i < MT; ++i) acc[i][0] = load(partial + i * kPackedColumns), acc[i][1] = load(partial + i * kPackedColumns + 16);
  for (int64_t k = k0; k < k1; ++k) {
    // The block is one stream; ask for it 4 KB ahead, so that memory keeps up while the rows are
    // multiplied (past the block's end: the next block, which this thread reads next).
    __builtin_prefetch(block + (k + kPrefetchK) * kPackedColumns);
    __builtin_prefetch(block + (k + kPrefetchK) * kPackedColumns + 16);
    const v16 w0 = load(block + k * kPackedColumns), w1 = load(block + k * kPackedColumns + 16);
    for (int i = 0; i < MT; ++i) {
      const float xs = x[i * in + k];
      acc[i][0] += xs * w0;
      acc[i][1] += xs * w1;
    }
  }
  for (int i = 0; i < MT; ++i) {
    float* pi = partial + i * kPackedColumns;
    std::memcpy(pi, &acc[i][0], sizeof acc[i][0]);
    std::memcpy(pi + 16, &acc[i][1], sizeof acc[i][1]);
    if (k1 < in) continue;
    float* yi = y + i * out;
    if (b)
      for (int64_t c = 0; c < cols; ++c) yi[c] = pi[c] + b[c];
    else
      std::memcpy(yi, pi, static_cast<size_t>(cols) * sizeof(float));
  }
}

template <int MT>
void rows_tail(const float* x, const float* block, const float* b, float* y, float* partial, int64_t in, int64_t out,
               int64_t cols, int64_t k0, int64_t k1, int64_t rest) {
  if constexpr (MT > 0) {
    if (rest == MT) return block_rows<MT>(x, block, b, y, partial, in, out, cols, k0, k1);
    rows_tail<MT - 1>(x, block, b, y, partial, in, out, cols, k0, k1, rest);
  }
}

}  // namespace

void pack_linear_weight(const float* w, float* packed, int64_t out, int64_t in) {
  const int64_t blocks = (out + kPackedColumns - 1) / kPackedColumns;
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(out * in))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    float* dst = packed + blk * in * kPackedColumns;
    for (int64_t c = 0; c < kPackedColumns; ++c) {
      const int64_t j = blk * kPackedColumns + c;
      for (int64_t k = 0; k < in; ++k) dst[k * kPackedColumns + c] = j < out ? w[j * in + k] : 0.0f;
    }
  }
}

void packed_linear_forward(const float* x, const float* packed, const float* b, float* y, int64_t rows, int64_t in,
                           int64_t out) {
  // TESSERA_PROFILE=2: one row per shape, "packed_linear 8x50304x256" (rows x out x in), as gemm's.
  thread_local char shape_name[64];
  if (profiler::detailed())
    std::snprintf(shape_name, sizeof shape_name, "packed_linear %lldx%lldx%lld", static_cast<long long>(rows),
                  static_cast<long long>(out), static_cast<long long>(in));
  TESSERA_PROFILE_SCOPE(profiler::detailed() ? shape_name : "packed_linear");
  constexpr int kRowTile = 8;
  // k in pieces of 64: a piece of a block (8 KB) stays in L1 while every group of 8 rows passes over it,
  // where a whole block (32 KB at in = 256) and 32 rows of x (32 KB) would not.
  constexpr int64_t kPieceK = 64;
  const int64_t blocks = (out + kPackedColumns - 1) / kPackedColumns;
#pragma omp parallel if (parallel : parallel_worth(out * in + rows * out))
  {
    thread_local std::vector<float> partial;  // [rows, 32]: the sums between pieces of k
    partial.resize(static_cast<size_t>(rows) * kPackedColumns);
    // Blocks are handed out in chunks (about 16 a thread) rather than in fixed halves: on a machine whose
    // cores are shared (a server's HTTP threads and its clients, other processes) a thread that loses its
    // core for a while leaves its blocks to the others, where a static split made the whole product wait
    // for it. Each output is computed the same way whichever thread takes its block.
    const int64_t chunk = std::max<int64_t>(1, blocks / (16 * static_cast<int64_t>(omp_get_num_threads())));
#pragma omp for schedule(dynamic, chunk)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const float* block = packed + blk * in * kPackedColumns;
      const int64_t j0 = blk * kPackedColumns, cols = std::min(kPackedColumns, out - j0);
      const float* bj = b ? b + j0 : nullptr;
      for (int64_t k0 = 0; k0 < in || k0 == 0; k0 += kPieceK) {
        const int64_t k1 = std::min(in, k0 + kPieceK);
        int64_t i = 0;
        for (; i + kRowTile <= rows; i += kRowTile)
          block_rows<kRowTile>(x + i * in, block, bj, y + i * out + j0, partial.data() + i * kPackedColumns, in, out,
                               cols, k0, k1);
        if (i < rows)
          rows_tail<kRowTile - 1>(x + i * in, block, bj, y + i * out + j0, partial.data() + i * kPackedColumns, in,
                                  out, cols, k0, k1, rows - i);
        if (k1 >= in) break;
      }
    }
  }
}

}  // namespace tessera::kernels::cpu
