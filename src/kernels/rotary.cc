#include "kernels/rotary.h"

#include "kernels/cpu/rotary.h"
#include "kernels/cuda/rotary.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {
namespace {

void check_rope(const char* kernel, const Tensor& x, const Tensor& positions) {
  TESSERA_CHECK(x.ndim() == 3, kernel, ": ", shape_str(x.shape()), " is not [rows, heads, head_dim]");
  check_numel(kernel, "positions", positions, x.dim(0));
}

}  // namespace

void rope_forward(const Tensor& x, const Tensor& positions, int64_t rot_dim, float base, const math::RopeScaling& scaling) {
  const Device d = kernel_device("rope_forward", {&x, &positions}, Impl::kCpuAndCuda);
  check_rope("rope_forward", x, positions);
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::rope_forward(x.f32(), positions.i32(), x.dim(0), x.dim(1), x.dim(2), rot_dim, base, scaling);
  cpu::rope_forward(x.f32(), positions.i32(), x.dim(0), x.dim(1), x.dim(2), rot_dim, base, scaling);
}

void rope_backward(const Tensor& dx, const Tensor& positions, int64_t rot_dim, float base, const math::RopeScaling& scaling) {
  const Device d = kernel_device("rope_backward", {&dx, &positions}, Impl::kCpuAndCuda);
  check_rope("rope_backward", dx, positions);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::rope_backward(dx.f32(), positions.i32(), dx.dim(0), dx.dim(1), dx.dim(2), rot_dim, base, scaling);
  cpu::rope_backward(dx.f32(), positions.i32(), dx.dim(0), dx.dim(1), dx.dim(2), rot_dim, base, scaling);
}

}  // namespace tessera::kernels
