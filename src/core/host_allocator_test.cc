// The caching host allocator (core/host_allocator.h): large blocks are kept and handed out again to a
// request they fit (best fit, within 1/8), small ones and those beyond the limit go back to the heap,
// every block is 64-byte aligned, and concurrent use keeps each block to one owner.
#include "core/host_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace tessera {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

TEST(CachingHostAllocator, AFreedLargeBlockServesTheNextRequestItFits) {
  CachingHostAllocator a(64 * kMiB);
  void* p = a.allocate(4 * kMiB, 64);
  ASSERT_TRUE(aligned(p));
  std::memset(p, 1, 4 * kMiB);  // the whole block is usable
  a.deallocate(p, 4 * kMiB);
  EXPECT_EQ(a.cached_bytes(), 4 * kMiB);
  void* q = a.allocate(4 * kMiB - 4096, 64);  // smaller by less than 1/8: the same block
  EXPECT_EQ(q, p);
  EXPECT_EQ(a.cached_bytes(), 0u);
  a.deallocate(q, 4 * kMiB - 4096);  // the block's own size is kept, whatever the request was
  EXPECT_EQ(a.cached_bytes(), 4 * kMiB);
  void* big = a.allocate(5 * kMiB, 64);  // larger than the block: a new one
  EXPECT_NE(big, p);
  void* small = a.allocate(3 * kMiB, 64);  // the block is more than 1/8 too large for it: a new one
  EXPECT_NE(small, p);
  EXPECT_EQ(a.cached_bytes(), 4 * kMiB);
  a.deallocate(big, 5 * kMiB);
  a.deallocate(small, 3 * kMiB);
  EXPECT_EQ(a.cached_bytes(), 12 * kMiB);
  a.release_cached();
  EXPECT_EQ(a.cached_bytes(), 0u);
}

TEST(CachingHostAllocator, BestFitTakesTheSmallestBlockThatFits) {
  CachingHostAllocator a(64 * kMiB);
  void* large = a.allocate(8 * kMiB, 64);
  void* fit = a.allocate(2 * kMiB, 64);
  a.deallocate(large, 8 * kMiB);
  a.deallocate(fit, 2 * kMiB);
  EXPECT_EQ(a.allocate(2 * kMiB - 64, 64), fit);
  EXPECT_EQ(a.allocate(8 * kMiB, 64), large);
  a.deallocate(fit, 2 * kMiB - 64);
  a.deallocate(large, 8 * kMiB);
}

TEST(CachingHostAllocator, SmallBlocksAndBlocksBeyondTheLimitAreNotKept) {
  CachingHostAllocator a(5 * kMiB);
  void* tiny = a.allocate(1000, 64);
  ASSERT_TRUE(aligned(tiny));
  a.deallocate(tiny, 1000);
  EXPECT_EQ(a.cached_bytes(), 0u);
  void* p = a.allocate(4 * kMiB, 64);
  void* q = a.allocate(4 * kMiB, 64);
  a.deallocate(p, 4 * kMiB);
  a.deallocate(q, 4 * kMiB);  // 8 MiB would pass the 5 MiB limit: freed
  EXPECT_EQ(a.cached_bytes(), 4 * kMiB);
  CachingHostAllocator none(0);
  void* r = none.allocate(2 * kMiB, 64);
  none.deallocate(r, 2 * kMiB);
  EXPECT_EQ(none.cached_bytes(), 0u);
  void* zero = none.allocate(0, 64);  // a size of 0 is a valid, unique block
  EXPECT_NE(zero, nullptr);
  none.deallocate(zero, 0);
}

TEST(CachingHostAllocator, ConcurrentUseGivesEachBlockOneOwner) {
  CachingHostAllocator a(256 * kMiB);
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&a, &failures, t] {
      for (int i = 0; i < 200; ++i) {
        const size_t bytes = (1 + (i + t) % 3) * kMiB;
        auto* p = static_cast<unsigned char*>(a.allocate(bytes, 64));
        std::memset(p, t + 1, bytes);
        std::this_thread::yield();
        for (size_t j = 0; j < bytes; j += 4093)
          if (p[j] != t + 1) ++failures[t];  // another thread was handed the same block
        a.deallocate(p, bytes);
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

TEST(CachingHostAllocator, IsTheCpuAllocator) { EXPECT_EQ(&allocator_for(Device::cpu()), &host_allocator()); }

}  // namespace
}  // namespace tessera
