// The CUDA backend's runtime layer on a real device; skipped, with CUDA's reason, where none is present.
#include "kernels/cuda/cuda_runtime.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"

namespace tessera::cuda {
namespace {

TEST(CudaRuntime, DeviceCountGivesAReasonWhenThereIsNone) {
  std::string why;
  const int n = device_count(&why);
  EXPECT_GE(n, 0);
  EXPECT_EQ(n == 0, !why.empty()) << why;
  if (n == 0) {
    EXPECT_NE(why.find("no CUDA device"), std::string::npos) << why;
  }
}

TEST(CudaRuntime, ErrorsNameTheCallAndCudasMessage) {
  try {
    check(static_cast<int>(cudaErrorInvalidValue), "cudaMemcpy");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaMemcpy failed: cudaErrorInvalidValue"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check(static_cast<int>(cudaSuccess), "cudaMemcpy"));
}

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (device_count(&why) == 0) GTEST_SKIP() << why;
    register_device_allocators(size_t{1} << 30);
  }
};

TEST_F(CudaDevice, TheRegisteredAllocatorHandsOutDeviceMemoryAndReusesIt) {
  Allocator& a = allocator_for(Device{DeviceType::CUDA, 0});
  EXPECT_EQ(&a, &device_allocator(0));
  const size_t n = 1000;
  void* p = a.allocate(n * sizeof(float), 256);
  cudaPointerAttributes attributes{};
  check(cudaPointerGetAttributes(&attributes, p), "cudaPointerGetAttributes");
  EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
  std::vector<float> host(n, 1.5f), back(n, 0.0f);
  check(cudaMemcpy(p, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(back.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  EXPECT_EQ(back, host);
  const uint64_t hits = device_allocator(0).stats().cache_hits;
  a.deallocate(p, n * sizeof(float));
  void* q = a.allocate(n * sizeof(float), 256);
  EXPECT_EQ(q, p);
  EXPECT_EQ(device_allocator(0).stats().cache_hits, hits + 1);
  a.deallocate(q, n * sizeof(float));
}

TEST_F(CudaDevice, ABlockFreedOnAStreamIsNotHandedToAnother) {
  cudaStream_t s = nullptr;
  check(cudaStreamCreate(&s), "cudaStreamCreate");
  StreamCachingAllocator& a = device_allocator(0);
  const Stream side{Device{DeviceType::CUDA, 0}, s};
  void* p = a.allocate_on(side, 4096, 256);
  check(cudaMemsetAsync(p, 0, 4096, s), "cudaMemsetAsync");
  a.deallocate(p, 4096);  // the memset may still be running on `side`
  void* q = a.allocate(4096, 256);  // the default stream
  EXPECT_NE(q, p);
  a.deallocate(q, 4096);
  EXPECT_EQ(a.allocate_on(side, 4096, 256), p);
  a.deallocate(p, 4096);
  a.release_cached();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
}

TEST_F(CudaDevice, MoreThanTheCapIsAClearError) {
  StreamCachingAllocator& a = device_allocator(0);
  try {
    a.allocate(a.cap_bytes() + 1, 256);
    FAIL() << "expected out of memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory on cuda:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::cuda
