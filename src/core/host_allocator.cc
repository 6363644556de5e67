#include "core/host_allocator.h"

#include <cstdlib>
#include <string>

#include "core/check.h"

namespace tessera {
namespace {

constexpr size_t kBlockAlignment = 64;  // a cache line, and an AVX-512 vector: what Storage asks for

void* aligned_block(size_t bytes, size_t alignment) {
  // aligned_alloc needs a size that is a multiple of the alignment, and a non-zero one.
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
  TESSERA_CHECK(p != nullptr, "out of memory allocating ", bytes, " bytes");
  return p;
}

}  // namespace

CachingHostAllocator::CachingHostAllocator(size_t max_cached_bytes, size_t min_cached_bytes)
    : max_cached_(max_cached_bytes), min_cached_(min_cached_bytes) {}

CachingHostAllocator::~CachingHostAllocator() { release_cached(); }

void* CachingHostAllocator::allocate(size_t bytes, size_t alignment) {
  if (bytes < min_cached_ || alignment > kBlockAlignment) return aligned_block(bytes, alignment);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.lower_bound(bytes);
    if (it != free_.end() && it->first <= bytes + bytes / 8) {
      void* p = it->second;
      cached_ -= it->first;
      free_.erase(it);
      return p;
    }
  }
  void* p = aligned_block(bytes, kBlockAlignment);
  std::lock_guard<std::mutex> lock(mutex_);
  sizes_.emplace(p, bytes);
  return p;
}

void CachingHostAllocator::deallocate(void* p, size_t bytes) {
  if (bytes >= min_cached_) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sizes_.find(p);
    if (it != sizes_.end()) {
      if (cached_ + it->second <= max_cached_) {
        free_.emplace(it->second, p);
        cached_ += it->second;
        return;
      }
      sizes_.erase(it);
    }
  }
  std::free(p);
}

void CachingHostAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, p] : free_) {
    sizes_.erase(p);
    std::free(p);
  }
  free_.clear();
  cached_ = 0;
}

size_t CachingHostAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

CachingHostAllocator& host_allocator() {
  // Never destroyed: tensors with static storage duration may be freed after any static would be.
  static CachingHostAllocator* allocator = [] {
    size_t mib = 2048;
    if (const char* env = std::getenv("TESSERA_HOST_CACHE_MIB")) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(env, &end, 10);
      TESSERA_CHECK(end != env && *end == '\0', "TESSERA_HOST_CACHE_MIB=", env, ": must be a whole number of MiB");
      mib = static_cast<size_t>(v);
    }
    return new CachingHostAllocator(mib << 20);
  }();
  return *allocator;
}

}  // namespace tessera
