// The per-call cost of the small kernels a decoding step or a small model's step is made of, at 1 and 2
// threads (issue 40): with kernels/parallel_grain.h, a kernel below the grain runs on the calling
// thread, so two threads must cost no more than one there. Beside them, the same loop forced into a
// parallel region at every size ("forced region"), which shows where a region starts to pay and so
// where the grain belongs, and what a call costs when the workers have gone to sleep between calls
// (--gap-us: a pause between calls, as a server has between requests).
//
// Run: build/release/bench_small_kernels [--calls N] [--gap-us G]. Prints, per kernel and size, the
// median and the 99th percentile of the per-call time in microseconds at each thread count, and the
// 2-thread/1-thread ratio of the medians. A benchmark, not a test: correctness is in kernels/*_test.cc.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/testing.h"
#include "core/timer.h"
#include "kernels/adamw.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/norms.h"
#include "kernels/parallel_grain.h"
#include "kernels/precision.h"

using namespace tessera;
using namespace tessera::kernels;

namespace {

struct Spread {
  double median_us, p99_us;
};

// Times `calls` calls of f (after 20 unmeasured ones) at `threads` threads.
Spread time_calls(const std::function<void()>& f, int threads, int calls, int gap_us) {
  omp_set_num_threads(threads);
  for (int i = 0; i < 20; ++i) f();
  std::vector<double> us(calls);
  for (int i = 0; i < calls; ++i) {
    if (gap_us > 0) usleep(gap_us);
    Timer t;
    f();
    us[i] = 1e6 * t.seconds();
  }
  std::sort(us.begin(), us.end());
  return {us[calls / 2], us[std::min(calls - 1, calls * 99 / 100)]};
}

// A += B over n elements in a parallel region whatever n is: the cost of the region itself.
void forced_region_add(float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 2000, gap_us = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--calls")) calls = std::max(10, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--gap-us")) gap_us = std::max(0, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: bench_small_kernels [--calls N] [--gap-us G]\n");
      return 2;
    }
  }
  const int max_threads = omp_get_max_threads();
  std::printf("calls %d, gap %d us, parallel grain %lld work units, up to %d threads\n", calls, gap_us,
              static_cast<long long>(kParallelGrain), max_threads);
  std::printf("%-22s %8s %12s %12s %12s %12s %7s\n", "kernel", "elements", "1t median", "1t p99", "2t median",
              "2t p99", "2t/1t");
  const int cols = 256;  // the hidden size of issue 40's serving model
  for (int64_t n : {256L, 1024L, 4096L, 16384L, 65536L, 262144L}) {
    std::vector<float> x = testing::random_vector(n, 1), y = testing::random_vector(n, 2), z(n), w(cols, 1.0f),
                       b(cols, 0.0f), m(n), v(n), mean(n / cols + 1), rstd(n / cols + 1);
    std::vector<uint16_t> h(n);
    const int64_t rows = std::max<int64_t>(1, n / cols);
    AdamWHyper hyper;
    hyper.lr = 1e-4f;
    const std::vector<std::pair<std::string, std::function<void()>>> kernels = {
        {"forced region add", [&] { forced_region_add(z.data(), x.data(), n); }},
        {"add_into", [&] { cpu::add_into(z.data(), x.data(), n); }},
        {"gelu_forward", [&] { cpu::gelu_forward(x.data(), z.data(), n); }},
        {"layernorm_forward", [&] {
           cpu::layernorm_forward(x.data(), w.data(), b.data(), z.data(), mean.data(), rstd.data(), rows, cols, 1e-5f);
         }},
        {"adamw_step", [&] { cpu::adamw_step(z.data(), y.data(), m.data(), v.data(), n, hyper); }},
        {"encode_16bit (bf16)", [&] { encode_16bit(DType::BF16, x.data(), h.data(), n); }},
    };
    for (const auto& [name, f] : kernels) {
      const Spread one = time_calls(f, 1, calls, gap_us);
      if (max_threads < 2) {
        std::printf("%-22s %8lld %12.2f %12.2f\n", name.c_str(), static_cast<long long>(n), one.median_us, one.p99_us);
        continue;
      }
      const Spread two = time_calls(f, 2, calls, gap_us);
      std::printf("%-22s %8lld %12.2f %12.2f %12.2f %12.2f %7.2f\n", name.c_str(), static_cast<long long>(n),
                  one.median_us, one.p99_us, two.median_us, two.p99_us, two.median_us / one.median_us);
    }
  }
  omp_set_num_threads(max_threads);
  return 0;
}
