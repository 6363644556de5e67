// The CUDA implementation of kernels/linear.h over device pointers: the products on the GEMM backend
// registered for CUDA devices (cuBLASLt, kernels/cuda/gemm_cublaslt.h; kernels/cuda/linear.cc), the
// bias gradient a column sum of its own (kernels/cuda/linear.cu). The same GemmArgs as the CPU path
// (kernels/cpu/linear.cc), so input_type and the *_rounded promises mean the same on both. Declared in
// every build, defined only in a CUDA one. `device` is the CUDA ordinal the pointers live on.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels::cuda {

// A GEMM input as the device holds it: fp32 (rounded to input_type by cuBLASLt's fast-16-bit compute
// types, the step-1 path), or a 16-bit buffer of input_type (bf16 x bf16 on the tensor cores, fp32
// accumulation: what --bf16 runs on a GPU). A 16-bit input's type must be input_type: its values are
// input_type's by construction, so it counts as rounded.
struct GemmInput {
  const void* data = nullptr;
  DType type = DType::F32;
};

// x [rows, in], w [out, in], b [out] or null -> y [rows, out] (overwritten, fp32), bias in the GEMM's
// epilogue.
void linear_forward(GemmInput x, GemmInput w, const float* b, float* y, int64_t rows, int64_t in, int64_t out,
                    DType input_type, bool x_rounded, bool w_rounded, int device);
// dx [rows, in] = dy w (overwritten), dw [out, in] += dy^T x, db [out] += the column sums of dy; any of
// dx, dw, db may be null. db sums dy_f32, the fp32 gradient (null only when db is): as the CPU, the
// bias gradient is not rounded to input_type. dy is the GEMMs' copy of it (dy_f32 itself or its 16-bit
// encoding).
void linear_backward(const float* dy_f32, GemmInput dy, GemmInput x, GemmInput w, float* dx, float* dw, float* db,
                     int64_t rows, int64_t in, int64_t out, DType input_type, bool x_rounded, bool w_rounded,
                     bool dy_rounded, int device);
// db [out] += the column sums of dy [rows, out] in kernels/math/column_sums.h's order, as
// kernels::cpu::linear_bias_grad does: the same bits as the CPU, whatever the launch.
void linear_bias_grad(const float* dy, float* db, int64_t rows, int64_t out);

}  // namespace tessera::kernels::cuda
