#include "kernels/dropout.h"

#include "kernels/cpu/dropout.h"
#include "kernels/cuda/dropout.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {

void dropout_forward(const Tensor& x, const Tensor& y, float p, uint64_t seed, uint64_t stream,
                     const DropoutRegion& r) {
  const Device d = kernel_device("dropout_forward", {&x, &y}, Impl::kCpuAndCuda);
  check_numel("dropout_forward", "x", x, r.seq * r.batch * r.hidden);
  check_numel("dropout_forward", "y", y, r.seq * r.batch * r.hidden);
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::dropout_forward(x.f32(), y.f32(), p, seed, stream, r);
  cpu::dropout_forward(x.f32(), y.f32(), p, seed, stream, r);
}

void dropout_backward(const Tensor& dy, const Tensor& dx, float p, uint64_t seed, uint64_t stream,
                      const DropoutRegion& r) {
  const Device d = kernel_device("dropout_backward", {&dy, &dx}, Impl::kCpuAndCuda);
  check_numel("dropout_backward", "dy", dy, r.seq * r.batch * r.hidden);
  check_numel("dropout_backward", "dx", dx, r.seq * r.batch * r.hidden);
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::dropout_backward(dy.f32(), dx.f32(), p, seed, stream, r);
  cpu::dropout_backward(dy.f32(), dx.f32(), p, seed, stream, r);
}

}  // namespace tessera::kernels
