// TESSERA_HOST_DEVICE marks a function that both the host compiler and nvcc's device pass compile, so
// the CPU kernels and a CUDA kernel share one definition of their per-element arithmetic (and the CPU
// tests check the arithmetic the GPU runs). Such functions are inline, use no exceptions and call only
// what device code has: the C math functions (sqrtf, logf, ...), constexpr std:: functions (nvcc takes
// them with --expt-relaxed-constexpr), plain arithmetic.
#pragma once

#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif

namespace tessera {

// Multiply, add and subtract rounded one at a time, never contracted into a fused multiply-add. For
// formulas whose CPU kernel spells them out in SIMD without FMA (kernels/cpu/adamw.cc): nvcc fuses
// a * b + c by default, which differs from the separately rounded result by far more than an ulp where
// the two terms nearly cancel (an AdamW moment whose gradient changed sign). The host compiler can
// contract too, so a file that relies on these is compiled with -ffp-contract=off (CMakeLists.txt).
TESSERA_HOST_DEVICE inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TESSERA_HOST_DEVICE inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
TESSERA_HOST_DEVICE inline float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

}  // namespace tessera
