#include "kernels/moe_combine.h"

#include "kernels/cpu/moe_combine.h"
#include "kernels/cuda/moe_combine.h"
#include "kernels/cuda/token_layout.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {

void scale_rows(const Tensor& rows, const Tensor& weight) {
  const Device d = kernel_device("scale_rows", {&rows, &weight}, Impl::kCpuAndCuda);
  const int64_t n = weight.numel();
  TESSERA_CHECK(n == 0 ? rows.numel() == 0 : rows.numel() % n == 0, "scale_rows: ", shape_str(rows.shape()),
                " is not ", n, " rows");
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      if (n > 0) cuda::scale_rows(rows.f32(), weight.f32(), n, rows.numel() / n);
      return;
    }
  if (n > 0) cpu::scale_rows(rows.f32(), weight.f32(), n, rows.numel() / n);
}

void scatter_slot_values(const Tensor& values, const Tensor& slot, const Tensor& out) {
  const Device d = kernel_device("scatter_slot_values", {&values, &slot, &out}, Impl::kCpuAndCuda);
  check_numel("scatter_slot_values", "slot", slot, values.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      if (values.numel() == 0) return;
      // Padding rows have slot -1; any other slot must be a value of out (the CPU loop checks the same).
      int32_t id = 0;
      const int64_t at = cuda::first_id_outside(slot.i32(), slot.numel(), -1, out.numel(), d.index, &id);
      TESSERA_CHECK(at < 0, "scatter_slot_values: slot ", id, " outside ", out.numel(), " values");
      return cuda::scatter_slot_values(values.f32(), slot.i32(), values.numel(), out.f32());
    }
  if (values.numel() > 0) cpu::scatter_slot_values(values.f32(), slot.i32(), values.numel(), out.f32(), out.numel());
}

void two_way_mix_forward(const Tensor& a, const Tensor& b, const Tensor& logits, const Tensor& y) {
  const Device d = kernel_device("two_way_mix_forward", {&a, &b, &logits, &y}, Impl::kCpuAndCuda);
  const int64_t rows = logits.numel() / 2;
  TESSERA_CHECK(logits.numel() == 2 * rows && rows > 0 && a.numel() % rows == 0, "two_way_mix_forward: logits ",
                shape_str(logits.shape()), " for ", shape_str(a.shape()));
  check_numel("two_way_mix_forward", "b", b, a.numel());
  check_numel("two_way_mix_forward", "y", y, a.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::two_way_mix_forward(a.f32(), b.f32(), logits.f32(), y.f32(), rows, a.numel() / rows);
  cpu::two_way_mix_forward(a.f32(), b.f32(), logits.f32(), y.f32(), rows, a.numel() / rows);
}

void two_way_mix_backward(const Tensor& a, const Tensor& b, const Tensor& logits, const Tensor& dy, const Tensor& da,
                          const Tensor& db, const Tensor& dlogits) {
  const Device d =
      kernel_device("two_way_mix_backward", {&a, &b, &logits, &dy, &da, &db, &dlogits}, Impl::kCpuAndCuda);
  const int64_t rows = logits.numel() / 2;
  TESSERA_CHECK(logits.numel() == 2 * rows && rows > 0 && a.numel() % rows == 0, "two_way_mix_backward: logits ",
                shape_str(logits.shape()), " for ", shape_str(a.shape()));
  for (const Tensor* t : {&b, &dy, &da, &db}) check_numel("two_way_mix_backward", "operand", *t, a.numel());
  check_numel("two_way_mix_backward", "dlogits", dlogits, logits.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::two_way_mix_backward(a.f32(), b.f32(), logits.f32(), dy.f32(), da.f32(), db.f32(), dlogits.f32(),
                                        rows, a.numel() / rows);
  cpu::two_way_mix_backward(a.f32(), b.f32(), logits.f32(), dy.f32(), da.f32(), db.f32(), dlogits.f32(), rows,
                            a.numel() / rows);
}

}  // namespace tessera::kernels
