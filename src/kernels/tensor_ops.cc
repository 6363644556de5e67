#include "kernels/tensor_ops.h"

#include <cstring>

#include "kernels/device_dispatch.h"

namespace tessera::kernels {

Tensor scalar_tensor(double value, Device device) {
  Tensor t = Tensor::empty({1}, DType::F32, device);
  kernel_device("scalar_tensor", {&t});
  t.f32()[0] = static_cast<float>(value);
  return t;
}

double scalar_value(const Tensor& t) {
  kernel_device("scalar_value", {&t});
  TESSERA_CHECK(t.numel() == 1, "scalar_value: a tensor of ", t.numel(), " elements is not a scalar");
  return static_cast<double>(t.f32()[0]);
}

Tensor from_host(const std::vector<int32_t>& values, Device device) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::I32, device);
  kernel_device("from_host", {&t});
  if (!values.empty()) std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}

void copy(const Tensor& dst, const Tensor& src) {
  kernel_device("copy", {&dst, &src});
  TESSERA_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(), "copy: ", src.numel(), " ",
                dtype_name(src.dtype()), " elements into ", dst.numel(), " ", dtype_name(dst.dtype()));
  std::memmove(dst.raw(), src.raw(), dst.nbytes());
}

}  // namespace tessera::kernels
