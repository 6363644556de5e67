// The copies a staged process group (comm/staged_process_group.h) makes between a device's tensors and
// host buffers, behind a small interface: tests stand host memory in for the device's
// (core/fake_device_testing.h) and copy with memcpy, the CUDA build copies with the kernels' transfers
// into pinned host memory (comm/cuda/pinned_host_allocator.h).
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace tessera::comm {

class DeviceStaging {
 public:
  virtual ~DeviceStaging() = default;
  // A cpu tensor of `numel` elements to stage through. The CUDA build pins it (cudaHostAlloc): copies
  // from and to pinned memory run at the bus's speed, and MPI reads it as any host memory.
  virtual Tensor host_buffer(int64_t numel, DType dtype) = 0;
  // host_dst = device_src, and device_dst = host_src: the same dtype and number of elements. Each comes
  // after the work already queued on the device and is complete when it returns.
  virtual void to_host(const Tensor& host_dst, const Tensor& device_src) = 0;
  virtual void to_device(const Tensor& device_dst, const Tensor& host_src) = 0;
};

// The real one: kernels::transfer for the copies (cudaMemcpy after the kernels before it), host buffers
// pinned where the build has CUDA and plain host memory elsewhere.
std::shared_ptr<DeviceStaging> make_transfer_staging();

}  // namespace tessera::comm
