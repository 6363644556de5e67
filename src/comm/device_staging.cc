#include "comm/device_staging.h"

#include "kernels/tensor_ops.h"

#if defined(TESSERA_WITH_CUDA)
#include "comm/cuda/pinned_host_allocator.h"
#endif

namespace tessera::comm {

namespace {

class TransferStaging final : public DeviceStaging {
 public:
  Tensor host_buffer(int64_t numel, DType dtype) override {
#if defined(TESSERA_WITH_CUDA)
    return Tensor::empty_from(cuda::pinned_host_allocator(), {numel}, dtype, Device::cpu());
#else
    return Tensor::empty({numel}, dtype, Device::cpu());
#endif
  }
  void to_host(const Tensor& host_dst, const Tensor& device_src) override { kernels::transfer(host_dst, device_src); }
  void to_device(const Tensor& device_dst, const Tensor& host_src) override { kernels::transfer(device_dst, host_src); }
};

}  // namespace

std::shared_ptr<DeviceStaging> make_transfer_staging() { return std::make_shared<TransferStaging>(); }

}  // namespace tessera::comm
