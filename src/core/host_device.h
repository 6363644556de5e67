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
