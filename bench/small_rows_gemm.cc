// A decoding step's linear layers, y = x W^T over 1 to 64 rows, on oneDNN's matmul and on
// kernels/packed_linear from a packed copy of W (issue 40): the median time per call of each, taken in turns so that a
// slower spell of a shared machine falls on both, at the thread count of OMP_NUM_THREADS.
//
// Run: build/release/bench_small_rows_gemm [--calls N]. Shapes: issue 40's serving model (hidden 256,
// GPT-2's padded vocabulary): the output layer and the four products of a layer.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/testing.h"
#include "core/timer.h"
#include "kernels/cpu/packed_linear.h"
#include "kernels/gemm.h"

using namespace tessera;

namespace {

void onednn_linear(const float* x, const float* w, float* y, int64_t rows, int64_t in, int64_t out) {
  kernels::GemmArgs g;
  g.trans_b = kernels::Trans::T;
  g.m = rows, g.n = out, g.k = in;
  g.a = x, g.lda = in, g.b = w, g.ldb = in, g.c = y, g.ldc = out;
  kernels::gemm(g);
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--calls")) calls = std::max(3, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: bench_small_rows_gemm [--calls N]\n");
      return 2;
    }
  }
  std::printf("%d threads, %d calls each\n%8s %7s %6s %14s %14s %8s %14s\n", omp_get_max_threads(), calls, "out", "in",
              "rows", "oneDNN ms", "packed ms", "ratio", "packed GB/s of W");
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{50304, 256}, {768, 256}, {1024, 256}, {256, 1024}, {256, 256}};
  for (const auto& [out, in] : shapes) {
    const std::vector<float> w = testing::random_vector(out * in, 1);
    std::vector<float> packed((out + 31) / 32 * 32 * in);
    kernels::cpu::pack_linear_weight(w.data(), packed.data(), out, in);
    for (int64_t rows : {1, 2, 4, 8, 16, 32, 64}) {
      const std::vector<float> x = testing::random_vector(rows * in, 2);
      std::vector<float> y(rows * out);
      std::vector<double> a, b;
      for (int c = 0; c < calls + 3; ++c) {
        Timer t;
        onednn_linear(x.data(), w.data(), y.data(), rows, in, out);
        const double ta = t.seconds();
        t.reset();
        kernels::cpu::packed_linear_forward(x.data(), packed.data(), nullptr, y.data(), rows, in, out);
        const double tb = t.seconds();
        if (c >= 3) a.push_back(ta), b.push_back(tb);  // the first calls create oneDNN's primitive
      }
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      const double ma = a[a.size() / 2], mb = b[b.size() / 2];
      std::printf("%8lld %7lld %6lld %14.4f %14.4f %8.2f %14.1f\n", static_cast<long long>(out),
                  static_cast<long long>(in), static_cast<long long>(rows), 1e3 * ma, 1e3 * mb, mb / ma,
                  4.0 * out * in / mb / 1e9);
    }
  }
  return 0;
}
