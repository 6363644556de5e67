#include "core/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/stream.h"
#include "core/tensor.h"

namespace tessera {
namespace {

Device cuda(int index) { return Device{DeviceType::CUDA, index}; }

// Host memory standing in for a device's, counting what passes through it.
class CountingAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, size_t alignment) override {
    ++allocations;
    live += static_cast<int64_t>(bytes);
    last_alignment = alignment;
    return std::aligned_alloc(alignment, (bytes + alignment) / alignment * alignment);
  }
  void deallocate(void* p, size_t bytes) override {
    ++deallocations;
    live -= static_cast<int64_t>(bytes);
    std::free(p);
  }
  int allocations = 0, deallocations = 0;
  int64_t live = 0;
  size_t last_alignment = 0;
};

// Registers an allocator for the test's duration and puts the previous one back.
struct Registered {
  Registered(Device d, Allocator* a) : device(d), previous(register_allocator(d, a)) {}
  ~Registered() { register_allocator(device, previous); }
  Device device;
  Allocator* previous;
};

TEST(Allocator, CpuStorageIsAlignedHostMemory) {
  Allocator& cpu = allocator_for(Device::cpu());
  for (size_t bytes : {0, 1, 63, 64, 1000}) {
    void* p = cpu.allocate(bytes, 64);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    cpu.deallocate(p, bytes);
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(Tensor::empty({7}).raw()) % 64, 0u);
}

TEST(Allocator, CudaWithoutABackendIsAClearError) {
  try {
    Tensor::empty({2, 3}, DType::F32, cuda(0));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no allocator for device cuda:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("built without CUDA"), std::string::npos) << msg;
  }
  EXPECT_THROW(allocator_for(cuda(kMaxDevicesPerType)), Error);
  EXPECT_THROW(allocator_for(cuda(-1)), Error);
  EXPECT_THROW(allocator_for(Device{DeviceType::CPU, 1}), Error);
}

// A backend's allocator is used for its device's tensors, gets back exactly what it gave, and its
// bytes are counted in the memory report like host ones.
TEST(Allocator, RegisteredAllocatorServesItsDevice) {
  CountingAllocator counting;
  {
    Registered reg(cuda(1), &counting);
    const int64_t live_before = TensorMemory::live_bytes();
    {
      Tensor t = Tensor::empty({4, 5}, DType::BF16, cuda(1));
      EXPECT_EQ(t.device(), cuda(1));
      EXPECT_EQ(counting.allocations, 1);
      EXPECT_EQ(counting.live, 40);
      EXPECT_EQ(counting.last_alignment, 64u);
      EXPECT_EQ(TensorMemory::live_bytes(), live_before + 40);
      EXPECT_GE(TensorMemory::peak_bytes(), live_before + 40);
      Tensor view = t.narrow(1, 2);  // a view shares the storage: no allocation
      EXPECT_EQ(counting.allocations, 1);
      EXPECT_EQ(view.device(), cuda(1));
      // Other devices are untouched.
      Tensor::empty({3});
      EXPECT_THROW(Tensor::empty({3}, DType::F32, cuda(0)), Error);
    }
    EXPECT_EQ(counting.deallocations, 1);
    EXPECT_EQ(counting.live, 0);
    EXPECT_EQ(TensorMemory::live_bytes(), live_before);
  }
  EXPECT_THROW(Tensor::empty({1}, DType::F32, cuda(1)), Error);  // unregistered again
}

// A storage returns its bytes to the allocator that made it, even when the device's allocator has
// been replaced since.
TEST(Allocator, StorageFreesThroughTheAllocatorThatMadeIt) {
  CountingAllocator first, second;
  Tensor kept;
  {
    Registered a(cuda(2), &first);
    kept = Tensor::empty({16}, DType::F32, cuda(2));
    Registered b(cuda(2), &second);
    Tensor other = Tensor::empty({8}, DType::F32, cuda(2));
    EXPECT_EQ(second.allocations, 1);
  }
  EXPECT_EQ(second.deallocations, 1);
  EXPECT_EQ(first.deallocations, 0);
  kept = Tensor();
  EXPECT_EQ(first.deallocations, 1);
  EXPECT_EQ(first.live, 0);
}

TEST(Stream, DefaultStreamIsANullHandleOnItsDevice) {
  Stream s = Stream::default_for(Device::cpu());
  EXPECT_TRUE(s.is_default());
  EXPECT_EQ(s.device, Device::cpu());
  int native = 0;
  Stream t{cuda(0), &native};
  EXPECT_FALSE(t.is_default());
  EXPECT_FALSE(s == t);
}

}  // namespace
}  // namespace tessera
