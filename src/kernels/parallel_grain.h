// When a CPU kernel's loop is worth an OpenMP parallel region.
//
// Opening a region costs a few microseconds when the worker threads are spinning, tens of microseconds
// when one has to be woken from sleep, and up to the host's scheduling quantum (about 5 ms) on a cloud
// machine whose host is slow to resume the worker's virtual CPU. A decoding step or a small model's
// training step runs dozens of kernels of a few thousand elements each, which take microseconds on one
// thread: there, the region costs more than it saves, and with two threads a step can be many times
// slower than with one (issue 40). So, as PyTorch's at::parallel_for does with its grain size, a loop
// with less work than kParallelGrain runs on the calling thread, as `#pragma omp parallel for
// if (parallel_worth(work))`. A region with a false `if` runs as a team of one without touching the
// workers. The kernels' results do not depend on the number of threads, so this changes no bit.
//
// `work` is about one unit per element read or written; kernels whose elements cost much more (a
// transcendental, a row of a softmax) count more per element. bench/bench_small_kernels measures where
// two threads start to pay (BENCHMARKS.md, "Small kernels").
#pragma once

#include <cstdint>

namespace tessera::kernels {

inline constexpr int64_t kParallelGrain = 32768;

inline bool parallel_worth(int64_t work) { return work >= kParallelGrain; }

}  // namespace tessera::kernels
