// The CUDA implementation of kernels/linear.h over device pointers: the products on the GEMM backend
// registered for CUDA devices (cuBLASLt, kernels/cuda/gemm_cublaslt.h; kernels/cuda/linear.cc), the
// bias gradient a column sum of its own (kernels/cuda/linear.cu). The same GemmArgs as the CPU path
// (kernels/cpu/linear.cc), so input_type and the *_rounded promises mean the same on both. Declared in
// every build, defined only in a CUDA one. `device` is the CUDA ordinal the pointers live on.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels::cuda {

// x [rows, in], w [out, in], b [out] or null -> y [rows, out] (overwritten), bias in the GEMM's epilogue.
void linear_forward(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t in, int64_t out,
                    DType input_type, bool x_rounded, bool w_rounded, int device);
// dx [rows, in] = dy w (overwritten), dw [out, in] += dy^T x, db [out] += the column sums of dy; any of
// dx, dw, db may be null.
void linear_backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db, int64_t rows,
                     int64_t in, int64_t out, DType input_type, bool x_rounded, bool w_rounded, bool dy_rounded,
                     int device);
// db [out] += the column sums of dy [rows, out] in kernels/math/column_sums.h's order, as
// kernels::cpu::linear_bias_grad does: the same bits as the CPU, whatever the launch.
void linear_bias_grad(const float* dy, float* db, int64_t rows, int64_t out);

}  // namespace tessera::kernels::cuda
