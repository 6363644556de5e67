#include "core/stream_caching_allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <thread>

#include "core/check.h"
#include "core/tensor.h"

namespace tessera {
namespace {

const Device kGpu{DeviceType::CUDA, 0};

// Device memory stood in by host memory, with a capacity, recording every call.
class FakeDevice final : public BlockSource {
 public:
  explicit FakeDevice(size_t capacity) : capacity_(capacity) {}
  ~FakeDevice() override { EXPECT_TRUE(live_.empty()) << live_.size() << " blocks never freed"; }

  void* allocate_block(size_t bytes) override {
    if (used_ + bytes > capacity_) return nullptr;
    void* p = std::aligned_alloc(kDeviceBlockAlignment, bytes);
    live_[p] = bytes;
    used_ += bytes;
    return p;
  }
  void free_block(void* p, size_t bytes) override {
    EXPECT_EQ(live_.at(p), bytes);
    EXPECT_GT(syncs_, 0) << "a cached block was freed before the device was synchronized";
    live_.erase(p);
    used_ -= bytes;
    std::free(p);
  }
  void synchronize() override { ++syncs_; }
  // The memory operations, counted, then done on the host memory that stands in for the device's.
  void set_zero(void* p, size_t bytes) override {
    ++memory_ops_["set_zero"];
    BlockSource::set_zero(p, bytes);
  }
  void fill_f32(float* p, float value, size_t count) override {
    ++memory_ops_["fill_f32"];
    BlockSource::fill_f32(p, value, count);
  }
  void copy_bytes(void* dst, const void* src, size_t bytes) override {
    ++memory_ops_["copy_bytes"];
    BlockSource::copy_bytes(dst, src, bytes);
  }

  size_t used() const { return used_; }
  int syncs() const { return syncs_; }
  int memory_ops(const std::string& name) const { return memory_ops_.count(name) ? memory_ops_.at(name) : 0; }

 private:
  size_t capacity_, used_ = 0;
  int syncs_ = 0;
  std::map<void*, size_t> live_;
  std::map<std::string, int> memory_ops_;
};

Stream stream(uintptr_t id) { return Stream{kGpu, reinterpret_cast<void*>(id)}; }

TEST(StreamCachingAllocator, SizeClassesAddAtMostAQuarterOr511Bytes) {
  EXPECT_EQ(StreamCachingAllocator::size_class(0), 512u);
  EXPECT_EQ(StreamCachingAllocator::size_class(1), 512u);
  EXPECT_EQ(StreamCachingAllocator::size_class(512), 512u);
  EXPECT_EQ(StreamCachingAllocator::size_class(513), 1024u);
  EXPECT_EQ(StreamCachingAllocator::size_class(1025), 1536u);
  EXPECT_EQ(StreamCachingAllocator::size_class(4097), 5120u);
  EXPECT_EQ(StreamCachingAllocator::size_class(size_t{16} << 20), size_t{16} << 20);
  EXPECT_EQ(StreamCachingAllocator::size_class((size_t{16} << 20) + 1), size_t{18} << 20);
  size_t previous = 0;
  for (size_t bytes = 1; bytes < (size_t{64} << 20); bytes = bytes * 9 / 8 + 1) {
    const size_t c = StreamCachingAllocator::size_class(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_EQ(c % 512, 0u) << bytes;
    EXPECT_LE(c - bytes, std::max<size_t>(511, bytes / 4)) << bytes;
    EXPECT_LE(c - bytes, std::max<size_t>(512, size_t{4} << 20)) << bytes;
    EXPECT_GE(c, previous) << "classes grow with the request";
    previous = c;
  }
}

TEST(StreamCachingAllocator, AFreedBlockIsReusedOnItsOwnStreamOnly) {
  FakeDevice device(size_t{1} << 30);
  StreamCachingAllocator a(kGpu, device, size_t{1} << 30);
  void* p = a.allocate_on(stream(1), 1000, 256);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  a.deallocate(p, 1000);
  // Another stream may still be behind the kernels that used p: it gets a new block.
  void* q = a.allocate_on(stream(2), 1000, 256);
  EXPECT_NE(q, p);
  // The same stream, and any size of the same class, gets p back.
  void* r = a.allocate_on(stream(1), 900, 256);
  EXPECT_EQ(r, p);
  const CachingAllocatorStats s = a.stats();
  EXPECT_EQ(s.allocations, 3u);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.device_allocations, 2u);
  EXPECT_EQ(s.in_use_bytes, 2048u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 2048u);
  EXPECT_EQ(device.used(), 2048u);
  a.deallocate(q, 1000);
  a.deallocate(r, 900);
  EXPECT_EQ(a.stats().cached_bytes, 2048u);
  EXPECT_EQ(a.stats().peak_in_use_bytes, 2048u);
  a.release_cached();
  EXPECT_EQ(device.used(), 0u);
  EXPECT_EQ(a.stats().reserved_bytes, 0u);
  EXPECT_EQ(a.stats().device_frees, 2u);
}

TEST(StreamCachingAllocator, ADifferentClassIsNotReused) {
  FakeDevice device(size_t{1} << 30);
  StreamCachingAllocator a(kGpu, device, size_t{1} << 30);
  void* p = a.allocate_on(stream(0), 4096, 64);
  a.deallocate(p, 4096);
  void* q = a.allocate_on(stream(0), 8192, 64);
  EXPECT_NE(q, p);
  a.deallocate(q, 8192);
  EXPECT_EQ(a.stats().cache_hits, 0u);
}

TEST(StreamCachingAllocator, TheCapFirstFlushesTheCacheThenRefusesWithTheCounts) {
  FakeDevice device(size_t{1} << 30);
  const size_t mib = size_t{1} << 20;
  StreamCachingAllocator a(kGpu, device, 40 * mib);
  void* p = a.allocate_on(stream(1), 20 * mib, 256);
  a.deallocate(p, 20 * mib);  // cached: 20 MiB reserved
  // 24 MiB (a new class) fits under the cap only once the cached 20 MiB go back.
  void* q = a.allocate_on(stream(1), 24 * mib, 256);
  EXPECT_EQ(a.stats().flushes, 1u);
  EXPECT_EQ(a.stats().reserved_bytes, 24 * mib);
  EXPECT_GE(device.syncs(), 1);
  try {
    a.allocate_on(stream(1), 20 * mib, 256);
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory on cuda:0"), std::string::npos) << m;
    EXPECT_NE(m.find("24.0 MiB in use"), std::string::npos) << m;
    EXPECT_NE(m.find("cap of 40.0 MiB"), std::string::npos) << m;
  }
  a.deallocate(q, 24 * mib);
}

TEST(StreamCachingAllocator, ADeviceThatRefusesGetsTheCacheBackFirst) {
  const size_t mib = size_t{1} << 20;
  FakeDevice device(30 * mib);
  StreamCachingAllocator a(kGpu, device, size_t{1} << 40);
  void* p = a.allocate_on(stream(3), 20 * mib, 256);
  a.deallocate(p, 20 * mib);
  void* q = a.allocate_on(stream(4), 20 * mib, 256);  // another stream: the device must give it
  EXPECT_EQ(a.stats().flushes, 1u);
  EXPECT_EQ(device.used(), 20 * mib);
  EXPECT_THROW(a.allocate_on(stream(4), 20 * mib, 256), Error);
  a.deallocate(q, 20 * mib);
}

TEST(StreamCachingAllocator, BadCallsAreErrors) {
  FakeDevice device(size_t{1} << 30);
  StreamCachingAllocator a(kGpu, device, size_t{1} << 30);
  int x = 0;
  EXPECT_THROW(a.deallocate(&x, 4), Error);
  EXPECT_THROW(a.allocate_on(stream(0), 16, 512), Error);  // beyond what the device guarantees
  EXPECT_THROW(a.allocate_on(stream(0), 16, 3), Error);
  EXPECT_THROW(a.allocate_on(Stream{Device{DeviceType::CUDA, 1}, nullptr}, 16, 64), Error);
  void* p = a.allocate_on(stream(0), 100, 64);
  EXPECT_THROW(a.deallocate(p, 100000), Error);  // another class than it was allocated for
  a.deallocate(p, 100);
}

TEST(StreamCachingAllocator, AllocateUsesTheThreadsAllocationStream) {
  FakeDevice device(size_t{1} << 30);
  StreamCachingAllocator a(kGpu, device, size_t{1} << 30);
  void* p = nullptr;
  {
    AllocationStreamScope scope(stream(7));
    EXPECT_EQ(allocation_stream(kGpu), stream(7));
    p = a.allocate(1000, 64);
    a.deallocate(p, 1000);
    // Another thread is on the default stream: it does not get the block freed on stream 7.
    void* other = nullptr;
    std::thread([&] { other = a.allocate(1000, 64); }).join();
    EXPECT_NE(other, p);
    a.deallocate(other, 1000);
    EXPECT_EQ(a.allocate(1000, 64), p);
    a.deallocate(p, 1000);
  }
  EXPECT_TRUE(allocation_stream(kGpu).is_default());
  EXPECT_TRUE(allocation_stream(Device::cpu()).is_default());
}

// A tensor's own zero_, fill_, copy_from and clone reach the device's memory through its allocator
// (on a GPU: cudaMemsetAsync, a fill kernel, a device copy), never by host memset or memcpy.
TEST(StreamCachingAllocator, TensorMethodsUseTheDevicesMemoryOperations) {
  FakeDevice device(size_t{1} << 30);
  StreamCachingAllocator a(kGpu, device, size_t{1} << 30);
  Allocator* before = register_allocator(kGpu, &a);
  {
    const Tensor t = Tensor::zeros({3, 5}, DType::F32, kGpu);
    EXPECT_EQ(device.memory_ops("set_zero"), 1);
    EXPECT_EQ(t.f32()[14], 0.0f);  // host memory stands in for the device's
    t.fill_(2.5f);
    EXPECT_EQ(device.memory_ops("fill_f32"), 1);
    const Tensor u = t.clone();
    EXPECT_EQ(device.memory_ops("copy_bytes"), 1);
    EXPECT_EQ(u.device(), kGpu);
    EXPECT_EQ(u.f32()[7], 2.5f);
    u.zero_();
    t.copy_from(u);
    EXPECT_EQ(device.memory_ops("set_zero"), 2);
    EXPECT_EQ(device.memory_ops("copy_bytes"), 2);
    EXPECT_EQ(t.f32()[0], 0.0f);
    EXPECT_THROW(t.copy_from(Tensor::zeros({3, 5})), Error);  // the host to a device is a transfer
  }
  register_allocator(kGpu, before);
  a.release_cached();
}

}  // namespace
}  // namespace tessera
