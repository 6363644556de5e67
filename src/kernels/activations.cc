#include "kernels/activations.h"

#include "kernels/cpu/activations.h"
#include "kernels/cuda/activations.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {

void gelu_forward(const Tensor& x, const Tensor& y, DType round_output) {
  const Device d = kernel_device("gelu_forward", {&x, &y}, Impl::kCpuAndCuda);
  check_numel("gelu_forward", "y", y, x.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::gelu_forward(x.f32(), y.f32(), x.numel(), round_output);
  cpu::gelu_forward(x.f32(), y.f32(), x.numel(), round_output);
}

void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const Device d = kernel_device("gelu_backward", {&x, &dy, &dx}, Impl::kCpuAndCuda);
  check_numel("gelu_backward", "dy", dy, x.numel());
  check_numel("gelu_backward", "dx", dx, x.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::gelu_backward(x.f32(), dy.f32(), dx.f32(), x.numel());
  cpu::gelu_backward(x.f32(), dy.f32(), dx.f32(), x.numel());
}

void swiglu_forward(const Tensor& x, const Tensor& y, DType round_output) {
  const Device d = kernel_device("swiglu_forward", {&x, &y}, Impl::kCpuAndCuda);
  const int64_t width = y.dim(-1), rows = y.numel() / width;
  check_numel("swiglu_forward", "x", x, 2 * rows * width);
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::swiglu_forward(x.f32(), y.f32(), rows, width, round_output);
  cpu::swiglu_forward(x.f32(), y.f32(), rows, width, round_output);
}

void swiglu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const Device d = kernel_device("swiglu_backward", {&x, &dy, &dx}, Impl::kCpuAndCuda);
  const int64_t width = dy.dim(-1), rows = dy.numel() / width;
  check_numel("swiglu_backward", "x", x, 2 * rows * width);
  check_numel("swiglu_backward", "dx", dx, 2 * rows * width);
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::swiglu_backward(x.f32(), dy.f32(), dx.f32(), rows, width);
  cpu::swiglu_backward(x.f32(), dy.f32(), dx.f32(), rows, width);
}

void tanh_forward(const Tensor& x, const Tensor& y) {
  const Device d = kernel_device("tanh_forward", {&x, &y}, Impl::kCpuAndCuda);
  check_numel("tanh_forward", "y", y, x.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::tanh_forward(x.f32(), y.f32(), x.numel());
  cpu::tanh_forward(x.f32(), y.f32(), x.numel());
}

void tanh_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const Device d = kernel_device("tanh_backward", {&y, &dy, &dx}, Impl::kCpuAndCuda);
  check_numel("tanh_backward", "dy", dy, y.numel());
  check_numel("tanh_backward", "dx", dx, y.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::tanh_backward(y.f32(), dy.f32(), dx.f32(), y.numel());
  cpu::tanh_backward(y.f32(), dy.f32(), dx.f32(), y.numel());
}

}  // namespace tessera::kernels
