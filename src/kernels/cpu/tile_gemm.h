// Small dense products for the tiles of the attention kernel (64 x 64 x head_dim): too small for a
// oneDNN call per tile, and too slow as one output row at a time, which reloads and stores that row
// for every term. Here each call keeps a block of 6 rows x 16 columns of C in registers over the
// whole sum, loading one row of B (2 vectors) and broadcasting 6 values of A per step, so the loop
// is bound by FMAs rather than loads and stores (the standard GEMM micro-kernel shape for 16
// vector registers, as in BLIS's Haswell kernel).
//
// Written with the GCC/Clang vector extension rather than intrinsics: with -march=native it becomes
// AVX2 FMAs here, and it still compiles (as SSE pairs) on a CPU without AVX. Every element of C is
// summed over t in increasing order, one FMA per term, so the result does not depend on the blocking.
#pragma once

#include <cstdint>
#include <cstring>

// Without AVX enabled GCC notes that 32-byte vector arguments change the ABI; these functions are
// all inline, so there is no ABI to keep.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tessera::kernels::tile {

typedef float Vec8 __attribute__((vector_size(32)));

inline Vec8 load8(const float* p) {
  Vec8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, Vec8 v) { std::memcpy(p, &v, sizeof v); }

// The A operand of C = A B: element (r, t) at a[r * row_stride + t * col_stride], so the same code
// reads A as stored or transposed.
struct Strided {
  const float* a;
  int64_t row_stride, col_stride;
  float at(int64_t r, int64_t t) const { return a[r * row_stride + t * col_stride]; }
};

// C[0:R, 0:8V) (+)= sum_{t < n} A(r, t) * B[t, 0:8V), B's row t at b + t * ldb; R x V accumulators.
template <int R, int V>
inline void block(float* c, int64_t ldc, Strided a, const float* b, int64_t ldb, int64_t n, bool accumulate) {
  Vec8 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = accumulate ? load8(c + r * ldc + 8 * v) : Vec8{};
  for (int64_t t = 0; t < n; ++t) {
    Vec8 bt[V];
    for (int v = 0; v < V; ++v) bt[v] = load8(b + t * ldb + 8 * v);
    for (int r = 0; r < R; ++r) {
      const float s = a.at(r, t);
      for (int v = 0; v < V; ++v) acc[r][v] += s * bt[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) store8(c + r * ldc + 8 * v, acc[r][v]);
}

// All m rows of one strip of 8V columns: blocks of 6 rows, then the remainder.
template <int V>
inline void strip(float* c, int64_t ldc, Strided a, const float* b, int64_t ldb, int64_t m, int64_t n,
                  bool accumulate) {
  int64_t r = 0;
  for (; r + 6 <= m; r += 6)
    block<6, V>(c + r * ldc, ldc, {a.a + r * a.row_stride, a.row_stride, a.col_stride}, b, ldb, n, accumulate);
  const Strided rest{a.a + r * a.row_stride, a.row_stride, a.col_stride};
  switch (m - r) {
    case 5: block<5, V>(c + r * ldc, ldc, rest, b, ldb, n, accumulate); break;
    case 4: block<4, V>(c + r * ldc, ldc, rest, b, ldb, n, accumulate); break;
    case 3: block<3, V>(c + r * ldc, ldc, rest, b, ldb, n, accumulate); break;
    case 2: block<2, V>(c + r * ldc, ldc, rest, b, ldb, n, accumulate); break;
    case 1: block<1, V>(c + r * ldc, ldc, rest, b, ldb, n, accumulate); break;
    default: break;
  }
}

// C[m, w] = A[m, n] B[n, w] (accumulate = false) or C += A B (true). C's row r at c + r * ldc, B's
// row t at b + t * ldb; any w (strips of 16 and 8 columns, then one column at a time).
inline void gemm(float* c, int64_t ldc, Strided a, const float* b, int64_t ldb, int64_t m, int64_t n, int64_t w,
                 bool accumulate) {
  int64_t x = 0;
  for (; x + 16 <= w; x += 16) strip<2>(c + x, ldc, a, b + x, ldb, m, n, accumulate);
  for (; x + 8 <= w; x += 8) strip<1>(c + x, ldc, a, b + x, ldb, m, n, accumulate);
  for (; x < w; ++x)
    for (int64_t r = 0; r < m; ++r) {
      float sum = accumulate ? c[r * ldc + x] : 0.0f;
      for (int64_t t = 0; t < n; ++t) sum += a.at(r, t) * b[t * ldb + x];
      c[r * ldc + x] = sum;
    }
}

}  // namespace tessera::kernels::tile

#pragma GCC diagnostic pop
