// What the CUDA kernel tests share (kernels/cuda/*_test.cc): a fixture that skips, with CUDA's reason,
// where no GPU is present, host <-> device copies of tensors, random inputs, and comparisons of a GPU
// result with the CPU kernel's (by tolerance or bit for bit).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/testing.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/tensor_ops.h"

namespace tessera::cuda::testing {

inline const Device kGpu{DeviceType::CUDA, 0};

// Skips each test where no GPU is usable (CUDA's reason in the message); otherwise registers the
// device allocators, so that tensors on cuda:0 can be made.
class CudaKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (device_count(&why) == 0) GTEST_SKIP() << why;  // "no CUDA device: <CUDA's reason>"
    register_device_allocators();
  }
};

// A copy of a host tensor on the GPU, and of a GPU tensor on the host (after the GPU's work is done):
// on the kernel stream, where the kernels run (a cudaMemcpy on the legacy stream is not ordered with it).
inline Tensor to_device(const Tensor& host) {
  Tensor d = Tensor::empty(host.shape(), host.dtype(), kGpu);
  const auto s = static_cast<cudaStream_t>(kernel_stream(kGpu.index));
  check(cudaMemcpyAsync(d.raw(), host.raw(), host.nbytes(), cudaMemcpyHostToDevice, s), "to_device");
  check(cudaStreamSynchronize(s), "to_device");
  return d;
}
inline Tensor to_host(const Tensor& device) {
  Tensor h = Tensor::empty(device.shape(), device.dtype(), Device::cpu());
  check(cudaDeviceSynchronize(), "the kernels before to_host");
  check(cudaMemcpy(h.raw(), device.raw(), device.nbytes(), cudaMemcpyDeviceToHost), "to_host");
  return h;
}

// An fp32 host tensor of uniform values in [lo, hi), the same for the same seed.
inline Tensor random(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::F32, Device::cpu());  // on the host whatever the default device
  auto v = tessera::testing::random_vector(static_cast<size_t>(t.numel()), seed, lo, hi);
  if (!v.empty()) std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

// Every element of the fp32 host tensors within atol + rtol * |want| (NaN only where want is NaN,
// infinities equal); the first few that are not are named.
inline ::testing::AssertionResult all_close(const Tensor& got, const Tensor& want, float rtol, float atol) {
  if (got.numel() != want.numel())
    return ::testing::AssertionFailure() << got.numel() << " elements vs " << want.numel();
  int bad = 0;
  auto failure = ::testing::AssertionFailure();
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float g = got.f32()[i], w = want.f32()[i];
    const bool ok = std::isnan(w) ? std::isnan(g) : (g == w || std::fabs(g - w) <= atol + rtol * std::fabs(w));
    if (!ok && bad++ < 5) failure << "[" << i << "] got " << g << " want " << w << "; ";
  }
  if (bad) return failure << bad << " of " << got.numel() << " elements differ";
  return ::testing::AssertionSuccess();
}

// The host tensors hold the same bytes.
inline ::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  if (got.nbytes() != want.nbytes())
    return ::testing::AssertionFailure() << got.nbytes() << " bytes vs " << want.nbytes();
  for (size_t i = 0; i < got.nbytes(); ++i)
    if (static_cast<const uint8_t*>(got.raw())[i] != static_cast<const uint8_t*>(want.raw())[i])
      return ::testing::AssertionFailure() << "byte " << i << " of " << got.nbytes() << " differs";
  return ::testing::AssertionSuccess();
}

// `n` int32 ids uniform in [0, limit), as a host tensor.
inline Tensor random_ids(int64_t n, int32_t limit, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, limit - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = id(rng);
  return kernels::from_host(v, Device::cpu());
}

}  // namespace tessera::cuda::testing
