// The products of a linear layer y = x W^T + b (W stored [out, in], rows of x are tokens) as GemmArgs,
// shared by its CPU (kernels/cpu/linear.cc) and CUDA (kernels/cuda/linear.cc) implementations so that
// both ask the GEMM backend for the same thing. `g` carries the caller's stream; the caller then sets
// the bias, dx's beta and which inputs already hold values of input_type.
#pragma once

#include <cstdint>

#include "kernels/gemm.h"

namespace tessera::kernels {

// y [rows, out] = x [rows, in] W^T.
inline GemmArgs linear_y_gemm(GemmArgs g, const float* x, const float* w, float* y, int64_t rows, int64_t in,
                              int64_t out, DType input_type) {
  g.trans_b = Trans::T;
  g.m = rows, g.n = out, g.k = in;
  g.a = x, g.lda = in;
  g.b = w, g.ldb = in;
  g.c = y, g.ldc = out;
  g.input_type = input_type;
  return g;
}

// dx [rows, in] = dy [rows, out] W (overwritten: beta 0).
inline GemmArgs linear_dx_gemm(GemmArgs g, const float* dy, const float* w, float* dx, int64_t rows, int64_t in,
                               int64_t out, DType input_type) {
  g.m = rows, g.n = in, g.k = out;
  g.a = dy, g.lda = out;
  g.b = w, g.ldb = in;
  g.c = dx, g.ldc = in;
  g.beta = 0.0f;
  g.input_type = input_type;
  return g;
}

// dW [out, in] += dy^T x (accumulated over micro-batches: beta 1).
inline GemmArgs linear_dw_gemm(GemmArgs g, const float* dy, const float* x, float* dw, int64_t rows, int64_t in,
                               int64_t out, DType input_type) {
  g.trans_a = Trans::T;
  g.m = out, g.n = in, g.k = rows;
  g.a = dy, g.lda = out;
  g.b = x, g.ldb = in;
  g.c = dw, g.ldc = in;
  g.beta = 1.0f;
  g.input_type = input_type;
  return g;
}

}  // namespace tessera::kernels
