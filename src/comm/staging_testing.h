// For tests only: a DeviceStaging that copies with memcpy between host tensors and tensors "on
// cuda:0" made by core/fake_device_testing.h's FakeDeviceAllocator (host memory standing in for a
// GPU's), and a scope that registers that allocator for cuda:0 while it lives.
#pragma once

#include <cstring>

#include "comm/device_staging.h"
#include "core/fake_device_testing.h"

namespace tessera::comm::testing {

inline const Device kFakeGpu{DeviceType::CUDA, 0};

class FakeDeviceScope {
 public:
  FakeDeviceScope() : previous_(register_allocator(kFakeGpu, &fake_)) {}
  ~FakeDeviceScope() { register_allocator(kFakeGpu, previous_); }
  FakeDeviceScope(const FakeDeviceScope&) = delete;
  FakeDeviceScope& operator=(const FakeDeviceScope&) = delete;

 private:
  tessera::testing::FakeDeviceAllocator fake_;
  Allocator* previous_;
};

// Checks the sides (host buffer on the cpu, the other on the fake device) as the real transfers would.
class MemcpyStaging final : public DeviceStaging {
 public:
  Tensor host_buffer(int64_t numel, DType dtype) override { return Tensor::empty({numel}, dtype, Device::cpu()); }
  void to_host(const Tensor& host_dst, const Tensor& device_src) override {
    check(host_dst, device_src);
    std::memcpy(host_dst.host_raw(), device_src.raw(), host_dst.nbytes());
  }
  void to_device(const Tensor& device_dst, const Tensor& host_src) override {
    check(host_src, device_dst);
    std::memcpy(device_dst.raw(), host_src.host_raw(), host_src.nbytes());
  }

 private:
  static void check(const Tensor& host, const Tensor& device) {
    TESSERA_CHECK(host.device().type == DeviceType::CPU && device.device().type == DeviceType::CUDA,
                  "MemcpyStaging: copies between the cpu and a device, not ", host.device().str(), " and ",
                  device.device().str());
    TESSERA_CHECK(host.dtype() == device.dtype() && host.numel() == device.numel(), "MemcpyStaging: ",
                  host.numel(), " ", dtype_name(host.dtype()), " vs ", device.numel(), " ", dtype_name(device.dtype()));
  }
};

// A copy of a host tensor on the fake device, and of a fake-device tensor on the host.
inline Tensor on_fake_device(const Tensor& host) {
  Tensor d = Tensor::empty(host.shape(), host.dtype(), kFakeGpu);
  std::memcpy(d.raw(), host.host_raw(), host.nbytes());
  return d;
}
inline Tensor from_fake_device(const Tensor& device) {
  Tensor h = Tensor::empty(device.shape(), device.dtype(), Device::cpu());
  std::memcpy(h.host_raw(), device.raw(), device.nbytes());
  return h;
}

}  // namespace tessera::comm::testing
