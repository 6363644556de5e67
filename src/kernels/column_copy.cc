#include "kernels/column_copy.h"

#include "kernels/cpu/column_copy.h"
#include "kernels/cuda/column_copy.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {
namespace {

int64_t last_dim(const Tensor& t) { return t.ndim() == 0 ? 1 : t.dim(t.ndim() - 1); }

// The operands of a copy or a sum: fp32, src's rows dst's times `repeat` (sum) or over it (copy), and
// every column read or written inside its row.
void check_columns(const char* kernel, const Tensor& src, Columns from, const Tensor& dst, Columns to,
                   int64_t count, int64_t src_rows) {
  TESSERA_CHECK(src.dtype() == DType::F32 && dst.dtype() == DType::F32, kernel, ": fp32 tensors only");
  const int64_t sw = last_dim(src), dw = last_dim(dst);
  TESSERA_CHECK(sw > 0 && dw > 0 && src.numel() == src_rows * sw, kernel, ": src ", shape_str(src.shape()),
                " is not ", src_rows, " rows against dst ", shape_str(dst.shape()));
  TESSERA_CHECK(count >= 0 && from.first >= 0 && to.first >= 0 && from.step > 0 && to.step > 0, kernel,
                ": bad columns");
  TESSERA_CHECK(count == 0 || (from.first + (count - 1) * from.step < sw && to.first + (count - 1) * to.step < dw),
                kernel, ": ", count, " columns from ", from.first, " step ", from.step, " (width ", sw, ") to ",
                to.first, " step ", to.step, " (width ", dw, ")");
}

}  // namespace

void copy_columns(const Tensor& src, Columns from, const Tensor& dst, Columns to, int64_t count, int64_t repeat) {
  const Device d = kernel_device("copy_columns", {&src, &dst}, Impl::kCpuAndCuda);
  TESSERA_CHECK(repeat > 0, "copy_columns: repeat ", repeat);
  const int64_t dst_rows = dst.numel() / last_dim(dst);
  TESSERA_CHECK(dst_rows % repeat == 0, "copy_columns: ", dst_rows, " rows are not a multiple of ", repeat);
  check_columns("copy_columns", src, from, dst, to, count, dst_rows / repeat);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::copy_columns(src.f32(), last_dim(src), from.first, from.step, dst.f32(), dst_rows, last_dim(dst),
                                to.first, to.step, count, repeat);
  cpu::copy_columns(src.f32(), last_dim(src), from.first, from.step, dst.f32(), dst_rows, last_dim(dst), to.first,
                    to.step, count, repeat);
}

void sum_columns(const Tensor& src, Columns from, const Tensor& dst, Columns to, int64_t count, int64_t repeat) {
  const Device d = kernel_device("sum_columns", {&src, &dst}, Impl::kCpuAndCuda);
  TESSERA_CHECK(repeat > 0, "sum_columns: repeat ", repeat);
  const int64_t dst_rows = dst.numel() / last_dim(dst);
  check_columns("sum_columns", src, from, dst, to, count, dst_rows * repeat);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::sum_columns(src.f32(), last_dim(src), from.first, from.step, dst.f32(), dst_rows, last_dim(dst),
                               to.first, to.step, count, repeat);
  cpu::sum_columns(src.f32(), last_dim(src), from.first, from.step, dst.f32(), dst_rows, last_dim(dst), to.first,
                   to.step, count, repeat);
}

}  // namespace tessera::kernels
