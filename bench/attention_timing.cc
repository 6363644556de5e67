// Wall time of the fused attention kernel at GPT-2 small's shape (seq 1024, 12 heads, head dim 64):
// forward and backward, with and without dropout, and with documents of 200 tokens (masked tiles
// skipped). Run: build/release/bench_attention_timing [repeats]; OMP_NUM_THREADS sets the threads.
// A benchmark, not a test: the kernel's correctness is kernels/attention_test.cc.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/testing.h"
#include "core/timer.h"
#include "kernels/cpu/attention.h"  // the CPU kernel itself, on host buffers

using namespace tessera;
using namespace tessera::kernels;
using namespace tessera::kernels::cpu;

namespace {

struct Buffers {
  std::vector<float> q, k, v, dout, out, lse, dq, dk, dv;
  explicit Buffers(const AttentionShape& s) {
    const size_t n = s.seq * s.batch * s.heads * s.head_dim;
    q = testing::random_vector(n, 1, -2.0f, 2.0f);
    k = testing::random_vector(n, 2, -2.0f, 2.0f);
    v = testing::random_vector(n, 3);
    dout = testing::random_vector(n, 4);
    out.resize(n);
    dq.resize(n);
    dk.resize(n);
    dv.resize(n);
    lse.resize(s.batch * s.heads * s.seq);
  }
};

// The best of `repeats` runs of forward and of backward, in ms.
void time_case(const char* what, const AttentionShape& s, float dropout, int repeats) {
  Buffers b(s);
  AttentionDropout drop;
  drop.p = dropout;
  drop.seed = 1234;
  drop.total_heads = s.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  double fwd = 1e30, bwd = 1e30;
  for (int r = 0; r <= repeats; ++r) {  // r = 0 warms up
    Timer f;
    attention_forward(b.q.data(), b.k.data(), b.v.data(), b.out.data(), b.lse.data(), s, scale, drop);
    const double tf = f.seconds();
    Timer g;
    attention_backward(b.q.data(), b.k.data(), b.v.data(), b.out.data(), b.lse.data(), b.dout.data(), b.dq.data(),
                       b.dk.data(), b.dv.data(), s, scale, drop);
    const double tb = g.seconds();
    if (r > 0) fwd = std::min(fwd, tf), bwd = std::min(bwd, tb);
  }
  // Causal attention's useful FLOPs: QK^T and PV over the lower triangle (forward), twice that backward.
  const double flops = 2.0 * 2.0 * s.seq * s.seq / 2.0 * s.heads * s.head_dim * s.batch;
  std::printf("%-34s dropout %.1f, %d threads: forward %7.1f ms (%5.1f GFLOP/s), backward %7.1f ms (%5.1f GFLOP/s)\n",
              what, dropout, omp_get_max_threads(), 1e3 * fwd, flops / fwd / 1e9, 1e3 * bwd, 2 * flops / bwd / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  AttentionShape s{.seq = 1024, .batch = 1, .heads = 12, .kv_heads = 12, .head_dim = 64};
  time_case("seq 1024 x 12 heads x d 64", s, 0.0f, repeats);
  time_case("seq 1024 x 12 heads x d 64", s, 0.1f, repeats);
  std::vector<int32_t> doc(1024);
  for (int i = 0; i < 1024; ++i) doc[i] = i / 200 * 200;  // documents of 200 tokens, off the tile grid
  s.doc_start = doc.data();
  time_case("seq 1024, documents of 200 tokens", s, 0.0f, repeats);
  return 0;
}
