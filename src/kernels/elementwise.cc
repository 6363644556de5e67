#include "kernels/elementwise.h"

#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {

void add_into(const Tensor& a, const Tensor& b) {
  const Device d = kernel_device("add_into", {&a, &b}, Impl::kCpuAndCuda);
  check_numel("add_into", "b", b, a.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::add_into(a.f32(), b.f32(), a.numel());
  cpu::add_into(a.f32(), b.f32(), a.numel());
}

void add_bias_rows(const Tensor& y, const Tensor& bias) {
  const Device d = kernel_device("add_bias_rows", {&y, &bias}, Impl::kCpuAndCuda);
  const int64_t cols = bias.numel();
  TESSERA_CHECK(cols > 0 && y.numel() % cols == 0, "add_bias_rows: ", shape_str(y.shape()), " is not rows of ", cols);
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::add_bias_rows(y.f32(), bias.f32(), y.numel() / cols, cols);
  cpu::add_bias_rows(y.f32(), bias.f32(), y.numel() / cols, cols);
}

void scale(const Tensor& x, float s, const Tensor& out) {
  const Device d = kernel_device("scale", {&x, &out}, Impl::kCpuAndCuda);
  check_numel("scale", "out", out, x.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::scale(x.f32(), s, out.f32(), x.numel());
  cpu::scale(x.f32(), s, out.f32(), x.numel());
}

}  // namespace tessera::kernels
