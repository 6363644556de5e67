#include "kernels/packed_linear.h"

#include "kernels/cpu/packed_linear.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {

Tensor pack_linear_weight(const Tensor& w) {
  kernel_device("pack_linear_weight", {&w});
  TESSERA_CHECK(w.ndim() == 2, "pack_linear_weight: weight ", shape_str(w.shape()), " is not [out, in]");
  const int64_t out = w.dim(0), in = w.dim(1);
  Tensor packed = Tensor::empty({(out + cpu::kPackedColumns - 1) / cpu::kPackedColumns, in, cpu::kPackedColumns},
                                 DType::F32, Device::cpu());
  cpu::pack_linear_weight(w.f32(), packed.f32(), out, in);
  return packed;
}

void packed_linear_forward(const Tensor& x, const Tensor& packed, const Tensor& b, const Tensor& y) {
  kernel_device("packed_linear_forward", {&x, &packed, &b, &y});
  TESSERA_CHECK(packed.ndim() == 3 && packed.dim(2) == cpu::kPackedColumns, "packed_linear_forward: ",
                shape_str(packed.shape()), " is not a packed weight");
  TESSERA_CHECK(y.ndim() >= 1, "packed_linear_forward: y has no dimensions");
  const int64_t in = packed.dim(1), out = y.dim(y.ndim() - 1), rows = in > 0 ? x.numel() / in : 0;
  TESSERA_CHECK(out > (packed.dim(0) - 1) * cpu::kPackedColumns && out <= packed.dim(0) * cpu::kPackedColumns,
                "packed_linear_forward: ", out, " outputs from a packed weight of ", packed.dim(0), " blocks");
  check_numel("packed_linear_forward", "x", x, rows * in);
  check_numel("packed_linear_forward", "y", y, rows * out);
  if (b.defined()) check_numel("packed_linear_forward", "bias", b, out);
  cpu::packed_linear_forward(x.f32(), packed.f32(), f32_or_null(b), y.f32(), rows, in, out);
}

}  // namespace tessera::kernels
