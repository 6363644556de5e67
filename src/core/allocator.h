// Where tensor storage comes from: one Allocator per device. The CPU one is built in (64-byte aligned
// host memory that keeps large blocks for reuse, core/host_allocator.h); a device backend (a caching CUDA allocator) registers its own at start-up, so core
// never names CUDA. A Storage keeps the allocator that made it and hands its bytes back to the same one.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace tessera {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // `bytes` (may be 0) aligned to `alignment` (a power of two), on this allocator's device. Throws
  // tessera::Error when out of memory; never returns null.
  virtual void* allocate(size_t bytes, size_t alignment) = 0;
  // Gives back what allocate(bytes, ...) returned.
  virtual void deallocate(void* p, size_t bytes) = 0;

  // Operations on memory of this allocator's device, in order with the device's kernels (a device's
  // allocator queues them on the kernels' stream; the host's run at once). Tensor::zero_, fill_ and
  // copy_from go through these, so a tensor's own methods are right wherever it lives. The defaults
  // are the host's: memset, a loop, memmove.
  virtual void set_zero(void* p, size_t bytes);
  virtual void fill_f32(float* p, float value, size_t count);
  virtual void copy_bytes(void* dst, const void* src, size_t bytes);  // may overlap on the host only
};

// The allocator of `device`. Throws a tessera::Error naming the device when none is registered (a
// CUDA device in a build without a CUDA backend).
Allocator& allocator_for(Device device);

// Makes `allocator` the one of `device` (nullptr: none) and returns the previous one. The allocator must
// outlive every storage it allocates; storages made before keep the allocator that made them. A
// backend calls this once at start-up; tests use it to stand in a counting allocator.
Allocator* register_allocator(Device device, Allocator* allocator);

// The most CUDA ordinals a registry slot exists for.
inline constexpr int kMaxDevicesPerType = 64;

}  // namespace tessera
