// A caching, stream-ordered allocator for device memory: the bookkeeping of a GPU backend's allocator,
// with the device's own malloc and free behind a BlockSource (cudaMalloc/cudaFree for CUDA, a fake in
// the tests), so that it is tested on machines without a GPU.
//
// Why cache: cudaMalloc and cudaFree synchronize the device and cost tens of microseconds to
// milliseconds; a training step frees and reallocates the same activation sizes every micro-batch.
// So freed blocks are kept and handed out again, as PyTorch's CUDA caching allocator does.
//
// Why per stream: a kernel queued on stream S may still be using a block after the host has freed it.
// Handing that block to the next allocation on the same S is safe (its work is queued after the
// earlier kernel's); handing it to another stream is not. So a freed block returns to the free list of
// the stream it was allocated on, and only allocations on that stream reuse it. Cached blocks go back to
// the device (after BlockSource::synchronize) when memory runs short or release_cached() is called.
//
// Size classes: requests are rounded up to a class so that nearby sizes share blocks: multiples of
// 512 bytes; below 16 MiB four classes per power of two (2^k, 1.25, 1.5, 1.75 x 2^k: at most a quarter
// or 511 bytes more than asked); from 16 MiB on, multiples of 2 MiB. A block is reused only for its own
// class.
//
// Cap: the bytes held from the device (in use plus cached) never exceed `cap_bytes`. An allocation that
// would exceed it, or that the device refuses, first gives every cached block back and retries; if it
// still cannot be met it throws a tessera::Error naming the device, the request, what is in use and
// cached, and the cap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/host_allocator.h"
#include "core/stream.h"

namespace tessera {

// Where a StreamCachingAllocator's blocks come from.
class BlockSource {
 public:
  virtual ~BlockSource() = default;
  // A block of `bytes` (a size class) aligned to at least kDeviceBlockAlignment, or nullptr when the
  // device has no memory for it.
  virtual void* allocate_block(size_t bytes) = 0;
  virtual void free_block(void* p, size_t bytes) = 0;
  // Waits for the work queued on every stream of the device, so that cached blocks may be freed.
  virtual void synchronize() = 0;
  // The device's memory operations (Allocator::set_zero, fill_f32, copy_bytes), which the caching
  // allocator passes on. The defaults are the host's, for a fake source of host memory in the tests.
  virtual void set_zero(void* p, size_t bytes) { host_allocator().set_zero(p, bytes); }
  virtual void fill_f32(float* p, float value, size_t count) { host_allocator().fill_f32(p, value, count); }
  virtual void copy_bytes(void* dst, const void* src, size_t bytes) { host_allocator().copy_bytes(dst, src, bytes); }
};

// What cudaMalloc guarantees, and the most a caller may ask for.
inline constexpr size_t kDeviceBlockAlignment = 256;

struct CachingAllocatorStats {
  size_t in_use_bytes = 0;         // class sizes of the blocks handed out and not yet freed
  size_t peak_in_use_bytes = 0;
  size_t cached_bytes = 0;         // freed blocks kept for reuse
  size_t reserved_bytes = 0;       // held from the device: in use + cached
  size_t peak_reserved_bytes = 0;
  uint64_t allocations = 0;        // allocate() calls
  uint64_t cache_hits = 0;         // ... served from a cached block
  uint64_t device_allocations = 0; // BlockSource::allocate_block calls that succeeded
  uint64_t device_frees = 0;       // BlockSource::free_block calls
  uint64_t flushes = 0;            // times every cached block went back to the device for lack of memory
};

class StreamCachingAllocator final : public Allocator {
 public:
  // `device` names the device in errors; `source` must outlive the allocator.
  StreamCachingAllocator(Device device, BlockSource& source, size_t cap_bytes);
  ~StreamCachingAllocator() override;

  // On this thread's allocation stream for the device (allocation_stream()).
  void* allocate(size_t bytes, size_t alignment) override;
  void deallocate(void* p, size_t bytes) override;
  void* allocate_on(Stream stream, size_t bytes, size_t alignment);
  void set_zero(void* p, size_t bytes) override { source_.set_zero(p, bytes); }
  void fill_f32(float* p, float value, size_t count) override { source_.fill_f32(p, value, count); }
  void copy_bytes(void* dst, const void* src, size_t bytes) override { source_.copy_bytes(dst, src, bytes); }

  // Synchronizes the device and gives every cached block back to it.
  void release_cached();
  CachingAllocatorStats stats() const;
  size_t cap_bytes() const { return cap_; }

  // The class a request of `bytes` is rounded up to.
  static size_t size_class(size_t bytes);

 private:
  struct Block {
    size_t size;  // its class
    void* stream;
  };
  void release_cached_locked();

  const Device device_;
  BlockSource& source_;
  const size_t cap_;
  mutable std::mutex mutex_;
  std::map<std::pair<void*, size_t>, std::vector<void*>> free_;  // (stream, class) -> cached blocks
  std::unordered_map<void*, Block> in_use_;
  CachingAllocatorStats stats_;
};

// The stream that allocations on `device` from this thread are ordered on: the device's default stream
// unless set. Kernels that run on another stream set it (AllocationStreamScope) so that the memory they
// free is reused only behind them.
Stream allocation_stream(Device device);
void set_allocation_stream(Stream stream);

class AllocationStreamScope {
 public:
  explicit AllocationStreamScope(Stream stream);
  ~AllocationStreamScope();
  AllocationStreamScope(const AllocationStreamScope&) = delete;
  AllocationStreamScope& operator=(const AllocationStreamScope&) = delete;

 private:
  Stream previous_;
};

}  // namespace tessera
