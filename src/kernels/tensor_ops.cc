#include "kernels/tensor_ops.h"

#include <cstring>

#include "kernels/cuda/transfer.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {

Tensor scalar_tensor(double value, Device device) {
  Tensor t = Tensor::empty({1}, DType::F32, device);
  const Device d = kernel_device("scalar_tensor", {&t}, Impl::kCpuAndCuda);
  const float v = static_cast<float>(value);
  if constexpr (kWithCuda) {
    if (on_cuda(d)) {
      cuda::copy_to_device(t.raw(), &v, sizeof(float), "scalar_tensor");
      return t;
    }
  }
  t.f32()[0] = v;
  return t;
}

double scalar_value(const Tensor& t) {
  const Device d = kernel_device("scalar_value", {&t}, Impl::kCpuAndCuda);
  TESSERA_CHECK(t.numel() == 1, "scalar_value: a tensor of ", t.numel(), " elements is not a scalar");
  if constexpr (kWithCuda) {
    if (on_cuda(d)) {
      float v;
      cuda::copy_to_host(&v, t.f32(), sizeof(float), "scalar_value");
      return static_cast<double>(v);
    }
  }
  return static_cast<double>(t.f32()[0]);
}

Tensor from_host(const std::vector<int32_t>& values, Device device) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::I32, device);
  const Device d = kernel_device("from_host", {&t}, Impl::kCpuAndCuda);
  if constexpr (kWithCuda) {
    if (on_cuda(d)) {
      cuda::copy_to_device(t.raw(), values.data(), t.nbytes(), "from_host");
      return t;
    }
  }
  if (!values.empty()) std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}

void copy(const Tensor& dst, const Tensor& src) {
  const Device d = kernel_device("copy", {&dst, &src}, Impl::kCpuAndCuda);
  TESSERA_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(), "copy: ", src.numel(), " ",
                dtype_name(src.dtype()), " elements into ", dst.numel(), " ", dtype_name(dst.dtype()));
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::copy_on_device(dst.raw(), src.raw(), dst.nbytes(), "copy");
  std::memmove(dst.raw(), src.raw(), dst.nbytes());
}

void transfer(const Tensor& dst, const Tensor& src) {
  TESSERA_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(), "transfer: ", src.numel(), " ",
                dtype_name(src.dtype()), " elements into ", dst.numel(), " ", dtype_name(dst.dtype()));
  const Device from = src.device(), to = dst.device();
  if (from == to) return copy(dst, src);
  // One side is the host (a CPU-only build has no other device, so it never gets here).
  kernel_device("transfer", {&src}, Impl::kCpuAndCuda);
  kernel_device("transfer", {&dst}, Impl::kCpuAndCuda);
  TESSERA_CHECK(from.type == DeviceType::CPU || to.type == DeviceType::CPU, "transfer: ", from.str(), " to ",
                to.str(), " goes through the host");
  if constexpr (kWithCuda) {
    if (on_cuda(to)) return cuda::copy_to_device(dst.raw(), src.raw(), dst.nbytes(), "transfer");
    return cuda::copy_to_host(dst.raw(), src.raw(), dst.nbytes(), "transfer");
  }
}

Tensor to_device(const Tensor& t, Device device) {
  if (t.device() == device) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  transfer(out, t);
  return out;
}

}  // namespace tessera::kernels
