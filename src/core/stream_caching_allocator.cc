#include "core/stream_caching_allocator.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <string>

#include "core/check.h"

namespace tessera {
namespace {

constexpr size_t kMinClass = 512;
constexpr size_t kLargeFrom = size_t{16} << 20;  // from here on, classes are multiples of kLargeStep
constexpr size_t kLargeStep = size_t{2} << 20;

size_t round_up(size_t n, size_t step) { return (n + step - 1) / step * step; }

std::string mib(size_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// This thread's allocation stream per CUDA ordinal (nullptr: the default stream).
thread_local std::array<void*, kMaxDevicesPerType> t_streams{};

}  // namespace

size_t StreamCachingAllocator::size_class(size_t bytes) {
  if (bytes <= kMinClass) return kMinClass;
  if (bytes >= kLargeFrom) return round_up(bytes, kLargeStep);
  const size_t octave = std::bit_floor(bytes);
  return round_up(bytes, std::max(kMinClass, octave / 4));
}

StreamCachingAllocator::StreamCachingAllocator(Device device, BlockSource& source, size_t cap_bytes)
    : device_(device), source_(source), cap_(cap_bytes) {}

StreamCachingAllocator::~StreamCachingAllocator() {
  // Blocks still in use belong to storages that outlive the allocator (a programming error the process
  // exit makes harmless); the cached ones go back.
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void* StreamCachingAllocator::allocate(size_t bytes, size_t alignment) {
  return allocate_on(allocation_stream(device_), bytes, alignment);
}

void* StreamCachingAllocator::allocate_on(Stream stream, size_t bytes, size_t alignment) {
  TESSERA_CHECK(stream.device == device_, "allocation on ", device_.str(), " ordered on a stream of ",
                stream.device.str());
  TESSERA_CHECK(alignment <= kDeviceBlockAlignment && std::has_single_bit(std::max<size_t>(alignment, 1)),
                "allocation on ", device_.str(), ": alignment ", alignment,
                " must be a power of two of at most ", kDeviceBlockAlignment);
  const size_t size = size_class(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.allocations;
  void* p = nullptr;
  if (auto it = free_.find({stream.native, size}); it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= size;
    ++stats_.cache_hits;
  } else {
    auto from_device = [&]() -> void* {
      return stats_.reserved_bytes + size <= cap_ ? source_.allocate_block(size) : nullptr;
    };
    p = from_device();
    if (p == nullptr && stats_.cached_bytes > 0) {
      release_cached_locked();
      ++stats_.flushes;
      p = from_device();
    }
    TESSERA_CHECK(p != nullptr, "out of memory on ", device_.str(), ": asked for ", bytes, " bytes (",
                  mib(size), " with rounding) with ", mib(stats_.in_use_bytes), " in use, ",
                  mib(stats_.cached_bytes), " cached and a cap of ", mib(cap_),
                  stats_.reserved_bytes + size > cap_ ? " (the cap)" : " (the device refused)");
    stats_.reserved_bytes += size;
    ++stats_.device_allocations;
  }
  in_use_.emplace(p, Block{size, stream.native});
  stats_.in_use_bytes += size;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return p;
}

void StreamCachingAllocator::deallocate(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_use_.find(p);
  TESSERA_CHECK(it != in_use_.end(), "freeing memory on ", device_.str(), " that its allocator did not hand out");
  const Block block = it->second;
  TESSERA_CHECK(size_class(bytes) == block.size, "freeing ", bytes, " bytes on ", device_.str(),
                " from a block allocated for another size class (", block.size, ")");
  in_use_.erase(it);
  free_[{block.stream, block.size}].push_back(p);
  stats_.in_use_bytes -= block.size;
  stats_.cached_bytes += block.size;
}

void StreamCachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void StreamCachingAllocator::release_cached_locked() {
  if (stats_.cached_bytes == 0) return;
  source_.synchronize();  // a cached block may still be read by a kernel queued on its stream
  for (auto& [key, blocks] : free_) {
    for (void* p : blocks) {
      source_.free_block(p, key.second);
      stats_.reserved_bytes -= key.second;
      ++stats_.device_frees;
    }
  }
  free_.clear();
  stats_.cached_bytes = 0;
}

CachingAllocatorStats StreamCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

Stream allocation_stream(Device device) {
  if (device.type == DeviceType::CPU) return Stream::default_for(device);  // the CPU has one stream
  TESSERA_CHECK(device.index >= 0 && device.index < kMaxDevicesPerType, "device ", device.str(),
                ": index out of range");
  return Stream{device, t_streams[device.index]};
}

void set_allocation_stream(Stream stream) {
  if (stream.device.type == DeviceType::CPU) return;
  TESSERA_CHECK(stream.device.index >= 0 && stream.device.index < kMaxDevicesPerType, "device ",
                stream.device.str(), ": index out of range");
  t_streams[stream.device.index] = stream.native;
}

AllocationStreamScope::AllocationStreamScope(Stream stream) : previous_(allocation_stream(stream.device)) {
  set_allocation_stream(stream);
}

AllocationStreamScope::~AllocationStreamScope() { set_allocation_stream(previous_); }

}  // namespace tessera
