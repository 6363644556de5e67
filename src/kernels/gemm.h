// One GEMM interface for every device. The CPU backend is oneDNN matmul; a cuBLAS(Lt) backend
// implements the same class later. All matrices are row-major fp32 with explicit leading dimensions.
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
};

class GemmBackend {
 public:
  virtual ~GemmBackend() = default;
  virtual void gemm(const GemmArgs& args) = 0;
  // The backend for a device (oneDNN on CPU).
  static GemmBackend& for_device(Device device);
};

// Convenience for the common case on the CPU.
inline void gemm(const GemmArgs& args) { GemmBackend::for_device(Device::cpu()).gemm(args); }

}  // namespace tessera::kernels
