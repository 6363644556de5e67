// The FMA peak of this machine at the OpenMP thread count: every thread runs independent chains of
// vector FMAs on registers only, the most fp32 arithmetic the cores can do with no memory traffic at all.
// bench_gemm_peak's MFU denominator and bench_decode_step's roofline.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "core/timer.h"

namespace tessera::bench {

// A vector as wide as the widest the compiler targets (-march=native): 16 floats with AVX-512, else 8.
#if defined(__AVX512F__)
constexpr int kLanes = 16;
#else
constexpr int kLanes = 8;
#endif
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

// FLOP/s of kChains independent FMA chains per thread (enough to cover the FMA latency x throughput
// of current cores: 4 cycles x 2 per cycle), on every OpenMP thread at once; the best of 5 runs.
inline double fma_peak_gflops() {
  constexpr int kChains = 12;
  constexpr int64_t kSteps = 1 << 22;  // ~50 ms per run at a few GHz
  double best = 0;
  for (int run = 0; run < 5; ++run) {
    float sink = 0;
    Timer t;
#pragma omp parallel reduction(+ : sink)
    {
      Vec acc[kChains], mul, add;
      for (int l = 0; l < kLanes; ++l) mul[l] = 0.999999f, add[l] = 1e-7f;
      for (int c = 0; c < kChains; ++c)
        for (int l = 0; l < kLanes; ++l) acc[c][l] = static_cast<float>(c + l);
      for (int64_t i = 0; i < kSteps; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * mul + add;  // one FMA (-ffp-contract=fast)
      for (int c = 0; c < kChains; ++c)
        for (int l = 0; l < kLanes; ++l) sink += acc[c][l];
    }
    const double flops = 2.0 * kChains * kLanes * static_cast<double>(kSteps) * omp_get_max_threads();
    best = std::max(best, flops / t.seconds() / 1e9);
    if (sink == 12345.0f) std::printf(" ");  // keeps the chains live
  }
  return best;
}


}  // namespace tessera::bench
