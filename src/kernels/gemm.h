// One GEMM interface for every device. The CPU backend is oneDNN matmul; a cuBLAS(Lt) backend
// implements the same class later. All matrices are row-major fp32 with explicit leading dimensions.
// Mixed precision (--bf16, --fp16) sets GemmArgs::input_type: the inputs are multiplied as 16-bit
// values and accumulated in fp32, as a 16-bit GEMM on a GPU does.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera::kernels {

enum class Trans : uint8_t { N, T };

struct GemmArgs {
  Trans trans_a = Trans::N, trans_b = Trans::N;
  int64_t m = 0, n = 0, k = 0;      // C is m x n, op(A) is m x k, op(B) is k x n
  const float* a = nullptr;
  int64_t lda = 0;                  // row stride of A as stored
  const float* b = nullptr;
  int64_t ldb = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  float alpha = 1.0f, beta = 0.0f;  // C = alpha * op(A) op(B) + beta * C
  const float* bias = nullptr;      // optional length-n row vector added to every row of C (beta must be 0)
  // F32, or BF16/F16: op(A) and op(B) are rounded to that type before they are multiplied (fp32
  // accumulation; C, alpha, beta and the bias stay fp32).
  DType input_type = DType::F32;
  // The caller's promise that A (B) already holds values of input_type, each an fp32 number that a
  // 16-bit one can hold (a weight rounded once per step, an activation its producer wrote rounded, one
  // widened from 16-bit storage). Such an input is not rounded again: rounding is idempotent, so the
  // product is bitwise the one of rounding it here.
  bool a_rounded = false, b_rounded = false;
};

class GemmBackend {
 public:
  virtual ~GemmBackend() = default;
  virtual void gemm(const GemmArgs& args) = 0;
  // The backend for a device (oneDNN on CPU).
  static GemmBackend& for_device(Device device);
  // Whether 16-bit inputs of type t run on a 16-bit kernel of this device (oneDNN: AVX512-BF16, AMX,
  // AVX512-FP16). Where not, they are rounded into fp32 copies and run on the fp32 kernel: the same
  // arithmetic, at fp32 speed.
  virtual bool native_16bit(DType t) = 0;
};

// Convenience for the common case on the CPU.
inline void gemm(const GemmArgs& args) { GemmBackend::for_device(Device::cpu()).gemm(args); }

}  // namespace tessera::kernels
