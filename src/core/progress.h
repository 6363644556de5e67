// Progress points for communication in flight. MPI implementations such as Open MPI advance a
// nonblocking collective only while the process is inside an MPI call, so a bucket all-reduce started
// during backward would otherwise do its work at the final wait. Whoever has operations in flight
// (parallel/GradBuckets) registers a hook that tests them; kernels call poll() at their entry points
// (each GEMM, attention), so the hook runs many times per transformer layer.
//
// A hook runs only on the thread that registered it and never inside a running hook, so that it can
// call MPI under MPI_THREAD_FUNNELED. poll() without hooks costs one load and a branch.
#pragma once

#include <atomic>
#include <functional>

namespace tessera::progress {

namespace detail {
extern std::atomic<int> g_hooks;
void run_hooks();
}  // namespace detail

// Registers `hook` under `owner` (one hook per owner; a second add replaces it). It runs on the calling
// thread only.
void add_hook(const void* owner, std::function<void()> hook);
void remove_hook(const void* owner);

// Runs the registered hooks of this thread.
inline void poll() {
  if (detail::g_hooks.load(std::memory_order_relaxed) > 0) detail::run_hooks();
}

}  // namespace tessera::progress
