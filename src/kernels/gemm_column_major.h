// The row-major GEMM of gemm.h as the column-major GEMM that cuBLAS and cuBLASLt compute.
//
// A row-major matrix X with row stride ld is, read column-major with leading dimension ld, X's
// transpose. So the row-major C = op(A) op(B) (m x n) is the column-major C^T = op(B)^T op(A)^T (n x m):
// cuBLASLt's first operand is our B, its second our A, with their transposes as given (a buffer that
// holds B row-major is B^T column-major, which is what the product needs), m and n swapped, and the
// leading dimensions unchanged. Our bias, one value per column of C, is one per row of C^T: cuBLASLt's
// bias vector (its length is the rows of D). The batch strides follow their buffers.
// No CUDA header is needed, so the mapping is tested on every machine (gemm_column_major_test.cc checks
// it against a column-major reference that reads the operands as cuBLASLt documents).
#pragma once

#include <cstdint>

#include "kernels/gemm.h"

namespace tessera::kernels {

// One operand as a column-major library describes it: `rows` x `cols` stored with leading dimension `ld`
// (a column is contiguous), `trans` applied before the product, matrix i of a batch at data + i*stride.
struct ColumnMajorOperand {
  const void* data = nullptr;
  DType type = DType::F32;
  bool trans = false;
  int64_t rows = 0, cols = 0, ld = 0, stride = 0;
};

// D = alpha op(A) op(B) + beta C (C and D the same buffer), then the epilogue with `bias` (length m,
// one per row of D), column-major; what cublasLtMatmul is called with.
struct ColumnMajorGemm {
  int64_t m = 0, n = 0, k = 0;
  ColumnMajorOperand a, b;
  void* c = nullptr;
  DType c_type = DType::F32;
  int64_t ldc = 0, stride_c = 0;
  float alpha = 1.0f, beta = 0.0f;
  GemmEpilogue epilogue = GemmEpilogue::None;
  const float* bias = nullptr;
  int64_t stride_bias = 0;
  int64_t batch = 1;
};

// The column-major form of `args`. Throws tessera::Error, naming the argument, on sizes or leading
// dimensions that do not describe a product (a leading dimension shorter than its row, a missing bias).
ColumnMajorGemm to_column_major(const GemmArgs& args);

}  // namespace tessera::kernels
