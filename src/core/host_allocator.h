// The CPU's tensor memory: 64-byte aligned host memory, with large blocks kept for reuse once freed.
// A training step frees and reallocates the same large buffers every micro-batch (activations, the
// MoE dispatcher's exchange buffers, the grouped experts' padded rows). glibc returns blocks above its
// mmap threshold (at most 32 MiB) to the kernel when freed, so each new one is page-faulted in again
// on first touch, a cost that measured at 2-4x the work itself for such buffers (BENCHMARKS.md,
// "Mixture of experts"). As a caching GPU allocator does, blocks of at least `min_cached_bytes` are
// kept when freed and handed out again to a request they fit within 1/8 (best fit), up to
// `max_cached_bytes` of them; smaller blocks go straight to the C heap.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include "core/allocator.h"

namespace tessera {

class CachingHostAllocator final : public Allocator {
 public:
  CachingHostAllocator(size_t max_cached_bytes, size_t min_cached_bytes = size_t{1} << 20);
  ~CachingHostAllocator() override;

  void* allocate(size_t bytes, size_t alignment) override;
  void deallocate(void* p, size_t bytes) override;

  // Frees every kept block (what a measurement of the process's resident memory wants first).
  void release_cached();
  size_t cached_bytes() const;

 private:
  const size_t max_cached_, min_cached_;
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;  // block size -> block
  std::map<void*, size_t> sizes_;      // every block made here and still alive or kept: its size
  size_t cached_ = 0;
};

// The CPU's allocator (registered for Device::cpu() from the start), its cache limited to
// TESSERA_HOST_CACHE_MIB MiB (default 2048; 0 keeps nothing).
CachingHostAllocator& host_allocator();

}  // namespace tessera
