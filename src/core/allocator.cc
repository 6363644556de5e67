#include "core/allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/host_allocator.h"

namespace tessera {
namespace {

// Slots are read at every tensor allocation, from any thread, so they are atomics rather than a map
// under a lock.
std::atomic<Allocator*>* slots(DeviceType type) {
  static std::atomic<Allocator*> cpu[1] = {&host_allocator()};
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

void Allocator::set_zero(void* p, size_t bytes) {
  if (bytes) std::memset(p, 0, bytes);
}

void Allocator::fill_f32(float* p, float value, size_t count) { std::fill(p, p + count, value); }

void Allocator::copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}

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
