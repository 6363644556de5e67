// For tests only: host memory standing in for a device's, so that tensors "on cuda:0" exist in a build
// without a GPU (register it with core/allocator.h's register_allocator, and restore the previous one).
#pragma once

#include <cstdlib>

#include "core/allocator.h"

namespace tessera::testing {

class FakeDeviceAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, size_t alignment) override {
    return std::aligned_alloc(alignment, (bytes + alignment) / alignment * alignment);
  }
  void deallocate(void* p, size_t) override { std::free(p); }
};

}  // namespace tessera::testing
