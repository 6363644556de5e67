#include "core/allocator.h"

#include <atomic>
#include <cstdlib>

#include "core/check.h"

namespace tessera {
namespace {

// 64-byte aligned host memory: a cache line and an AVX-512 vector.
class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, size_t alignment) override {
    // aligned_alloc needs a size that is a multiple of the alignment, and a non-zero one.
    size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    void* p = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
    TESSERA_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
    return p;
  }
  void deallocate(void* p, size_t) override { std::free(p); }
};

// Slots are read at every tensor allocation, from any thread, so they are atomics rather than a map
// under a lock. The host allocator is never destroyed: tensors with static storage duration may be
// freed after any function-local static would be.
std::atomic<Allocator*>* slots(DeviceType type) {
  static std::atomic<Allocator*> cpu[1] = {new HostAllocator};
  static std::atomic<Allocator*> cuda[kMaxDevicesPerType] = {};
  return type == DeviceType::CPU ? cpu : cuda;
}

std::atomic<Allocator*>& slot(Device device) {
  const int limit = device.type == DeviceType::CPU ? 1 : kMaxDevicesPerType;
  TESSERA_CHECK(device.index >= 0 && device.index < limit, "device ", device.str(), ": index out of range [0, ",
                limit, ")");
  return slots(device.type)[device.index];
}

}  // namespace

Allocator& allocator_for(Device device) {
  Allocator* a = slot(device).load(std::memory_order_acquire);
  TESSERA_CHECK(a != nullptr, "no allocator for device ", device.str(), ": Tessera was built without ",
                device.type == DeviceType::CUDA ? "CUDA" : "a backend for it",
                " (or its backend has not registered one)");
  return *a;
}

Allocator* register_allocator(Device device, Allocator* allocator) {
  return slot(device).exchange(allocator, std::memory_order_acq_rel);
}

}  // namespace tessera
