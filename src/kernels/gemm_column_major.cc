#include "kernels/gemm_column_major.h"

#include "core/check.h"

namespace tessera::kernels {

ColumnMajorGemm to_column_major(const GemmArgs& g) {
  TESSERA_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0 && g.batch >= 1, "gemm: m=", g.m, " n=", g.n, " k=", g.k,
                " batch=", g.batch, " must be non-negative (batch at least 1)");
  // Row-major storage: A is m x k (k x m when transposed), so each stored row holds k (or m) values.
  const int64_t a_row = g.trans_a == Trans::N ? g.k : g.m;
  const int64_t b_row = g.trans_b == Trans::N ? g.n : g.k;
  TESSERA_CHECK(g.lda >= a_row, "gemm: lda=", g.lda, " is shorter than a stored row of A (", a_row, ")");
  TESSERA_CHECK(g.ldb >= b_row, "gemm: ldb=", g.ldb, " is shorter than a stored row of B (", b_row, ")");
  TESSERA_CHECK(g.ldc >= g.n, "gemm: ldc=", g.ldc, " is shorter than a row of C (", g.n, ")");
  const GemmEpilogue epilogue = g.effective_epilogue();
  TESSERA_CHECK((epilogue == GemmEpilogue::Bias || epilogue == GemmEpilogue::BiasGeluTanh) == (g.bias != nullptr),
                "gemm: epilogue ", gemm_epilogue_name(epilogue), (g.bias ? " takes no bias" : " needs a bias"));

  ColumnMajorGemm c;
  c.m = g.n;
  c.n = g.m;
  c.k = g.k;
  // First operand: the buffer of B. Stored row-major as b_row-wide rows, it is column-major with
  // b_row rows; transposing it gives op(B)^T exactly when B was not transposed, and vice versa.
  c.a = ColumnMajorOperand{g.b, g.b_type, g.trans_b == Trans::T, b_row, g.trans_b == Trans::N ? g.k : g.n, g.ldb,
                           g.stride_b};
  c.b = ColumnMajorOperand{g.a, g.a_type, g.trans_a == Trans::T, a_row, g.trans_a == Trans::N ? g.m : g.k, g.lda,
                           g.stride_a};
  c.c = g.c;
  c.c_type = g.c_type;
  c.ldc = g.ldc;
  c.stride_c = g.stride_c;
  c.alpha = g.alpha;
  c.beta = g.beta;
  c.epilogue = epilogue;
  c.bias = g.bias;
  c.stride_bias = g.stride_bias;
  c.batch = g.batch;
  return c;
}

}  // namespace tessera::kernels
