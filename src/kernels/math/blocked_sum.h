// The order in which the GPU's one-launch sum of squares (kernels/cuda/adamw.cu) adds, spelled out for the
// CPU (kernels/cpu/adamw.cc) so that both give the same bits: the flat buffer cut into chunks of
// kBlockedChunk elements; in a chunk, lane l of kBlockedLanes (a thread of the GPU's block) adds
// x[l]^2, x[l + kBlockedLanes]^2, ... in turn; the lanes are combined as the block's reduction does (a
// butterfly over each warp of 32, then one over the warps' sums padded with zeros); the chunks' partials
// are summed the same way, lane l taking partials l, l + kBlockedLanes, ...
// Products and sums are rounded one at a time (no FMA on either side: the CPU file is compiled with
// -ffp-contract=off, the device code uses __dmul_rn/__dadd_rn).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace tessera::kernels::math {

inline constexpr int64_t kBlockedChunk = 8192;  // elements per partial sum
inline constexpr int kBlockedLanes = 256;       // the GPU's threads per block (kernels/cuda/launch.cuh kThreads)
inline constexpr int kWarp = 32;

TESSERA_HOST_DEVICE inline double dmul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
TESSERA_HOST_DEVICE inline double dadd_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// The GPU's butterfly over 32 values (v += shfl_xor(v, o) for o = 16, 8, 4, 2, 1): every lane ends with
// the same sum, returned. `v` is overwritten.
inline double butterfly32(double* v) {
  double next[kWarp];
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    for (int l = 0; l < kWarp; ++l) next[l] = dadd_rn(v[l], v[l ^ o]);
    for (int l = 0; l < kWarp; ++l) v[l] = next[l];
  }
  return v[0];
}

// kernels/cuda/launch.cuh's block_sum over kBlockedLanes lanes' values. `lanes` is overwritten.
inline double block_sum_order(double* lanes) {
  double warps[kWarp] = {};
  for (int w = 0; w < kBlockedLanes / kWarp; ++w) warps[w] = butterfly32(lanes + w * kWarp);
  return butterfly32(warps);
}

}  // namespace tessera::kernels::math
