#include "kernels/moe_combine.h"

#include "kernels/cpu/moe_combine.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {

void scale_rows(const Tensor& rows, const Tensor& weight) {
  kernel_device("scale_rows", {&rows, &weight});
  const int64_t n = weight.numel();
  TESSERA_CHECK(n == 0 ? rows.numel() == 0 : rows.numel() % n == 0, "scale_rows: ", shape_str(rows.shape()),
                " is not ", n, " rows");
  if (n > 0) cpu::scale_rows(rows.f32(), weight.f32(), n, rows.numel() / n);
}

void scatter_slot_values(const Tensor& values, const Tensor& slot, const Tensor& out) {
  kernel_device("scatter_slot_values", {&values, &slot, &out});
  check_numel("scatter_slot_values", "slot", slot, values.numel());
  if (values.numel() > 0) cpu::scatter_slot_values(values.f32(), slot.i32(), values.numel(), out.f32(), out.numel());
}

void two_way_mix_forward(const Tensor& a, const Tensor& b, const Tensor& logits, const Tensor& y) {
  kernel_device("two_way_mix_forward", {&a, &b, &logits, &y});
  const int64_t rows = logits.numel() / 2;
  TESSERA_CHECK(logits.numel() == 2 * rows && rows > 0 && a.numel() % rows == 0, "two_way_mix_forward: logits ",
                shape_str(logits.shape()), " for ", shape_str(a.shape()));
  check_numel("two_way_mix_forward", "b", b, a.numel());
  check_numel("two_way_mix_forward", "y", y, a.numel());
  cpu::two_way_mix_forward(a.f32(), b.f32(), logits.f32(), y.f32(), rows, a.numel() / rows);
}

void two_way_mix_backward(const Tensor& a, const Tensor& b, const Tensor& logits, const Tensor& dy, const Tensor& da,
                          const Tensor& db, const Tensor& dlogits) {
  kernel_device("two_way_mix_backward", {&a, &b, &logits, &dy, &da, &db, &dlogits});
  const int64_t rows = logits.numel() / 2;
  TESSERA_CHECK(logits.numel() == 2 * rows && rows > 0 && a.numel() % rows == 0, "two_way_mix_backward: logits ",
                shape_str(logits.shape()), " for ", shape_str(a.shape()));
  for (const Tensor* t : {&b, &dy, &da, &db}) check_numel("two_way_mix_backward", "operand", *t, a.numel());
  check_numel("two_way_mix_backward", "dlogits", dlogits, logits.numel());
  cpu::two_way_mix_backward(a.f32(), b.f32(), logits.f32(), dy.f32(), da.f32(), db.f32(), dlogits.f32(), rows,
                            a.numel() / rows);
}

}  // namespace tessera::kernels
