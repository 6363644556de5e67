#include "kernels/adamw.h"

#include "kernels/cpu/adamw.h"
#include "kernels/cuda/adamw.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamWHyper& h) {
  const Device d = kernel_device("adamw_step", {&param, &grad, &exp_avg, &exp_avg_sq}, Impl::kCpuAndCuda);
  const int64_t n = param.numel();
  TESSERA_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n, "adamw_step: ", n,
                " parameters with ", grad.numel(), " gradients and ", exp_avg.numel(), "/", exp_avg_sq.numel(),
                " moments");
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::adamw_step(param.f32(), grad.f32(), exp_avg.f32(), exp_avg_sq.f32(), n, h);
  cpu::adamw_step(param.f32(), grad.f32(), exp_avg.f32(), exp_avg_sq.f32(), n, h);
}

double sum_of_squares(const Tensor& x) {
  const Device d = kernel_device("sum_of_squares", {&x}, Impl::kCpuAndCuda);
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::sum_of_squares(x.f32(), x.numel(), d.index);
  return cpu::sum_of_squares(x.f32(), x.numel());
}

}  // namespace tessera::kernels
