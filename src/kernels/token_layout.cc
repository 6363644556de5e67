#include "kernels/token_layout.h"

#include "kernels/cpu/token_layout.h"
#include "kernels/cuda/token_layout.h"
#include "kernels/device_dispatch.h"

namespace tessera::kernels {
namespace {

// rows, groups, d of a split/merge from k [rows, groups, d], every operand's size checked.
void check_qkv(const char* kernel, const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v,
               int64_t per_group) {
  TESSERA_CHECK(k.ndim() == 3 && v.shape() == k.shape(), kernel, ": k ", shape_str(k.shape()), " and v ",
                shape_str(v.shape()), " are not both [rows, groups, d]");
  const int64_t rows = k.dim(0), groups = k.dim(1), d = k.dim(2);
  check_numel(kernel, "q", q, rows * groups * per_group * d);
  check_numel(kernel, "qkv", qkv, rows * groups * (per_group + 2) * d);
}

}  // namespace

void transpose_rows(const Tensor& src, const Tensor& dst) {
  const Device d = kernel_device("transpose_rows", {&src, &dst}, Impl::kCpuAndCuda);
  TESSERA_CHECK(src.ndim() == 2 && dst.shape() == Shape({src.dim(1), src.dim(0)}) && dst.dtype() == src.dtype(),
                "transpose_rows: ", shape_str(src.shape()), " into ", shape_str(dst.shape()));
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::transpose_rows(src.raw(), dst.raw(), src.dim(0), src.dim(1), dtype_size(src.dtype()));
  cpu::transpose_rows(src.raw(), dst.raw(), src.dim(0), src.dim(1), dtype_size(src.dtype()));
}

void fill_positions(const Tensor& positions, int64_t batch, int64_t first) {
  const Device d = kernel_device("fill_positions", {&positions}, Impl::kCpuAndCuda);
  TESSERA_CHECK(batch > 0 && positions.numel() % batch == 0, "fill_positions: ", positions.numel(),
                " positions are not rows of ", batch, " samples");
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::fill_positions(positions.i32(), positions.numel() / batch, batch, first);
  cpu::fill_positions(positions.i32(), positions.numel() / batch, batch, first);
}

void split_qkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, int64_t per_group) {
  const Device d = kernel_device("split_qkv", {&qkv, &q, &k, &v}, Impl::kCpuAndCuda);
  check_qkv("split_qkv", qkv, q, k, v, per_group);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::split_qkv(qkv.f32(), q.f32(), k.f32(), v.f32(), k.dim(0), k.dim(1), per_group, k.dim(2));
  cpu::split_qkv(qkv.f32(), q.f32(), k.f32(), v.f32(), k.dim(0), k.dim(1), per_group, k.dim(2));
}

void merge_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv, int64_t per_group) {
  const Device d = kernel_device("merge_qkv", {&q, &k, &v, &qkv}, Impl::kCpuAndCuda);
  check_qkv("merge_qkv", qkv, q, k, v, per_group);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::merge_qkv(q.f32(), k.f32(), v.f32(), qkv.f32(), k.dim(0), k.dim(1), per_group, k.dim(2));
  cpu::merge_qkv(q.f32(), k.f32(), v.f32(), qkv.f32(), k.dim(0), k.dim(1), per_group, k.dim(2));
}

IdOutside first_id_outside(const Tensor& ids, int64_t lo, int64_t hi) {
  const Device d = kernel_device("first_id_outside", {&ids}, Impl::kCpuAndCuda);
  IdOutside r;
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      r.index = cuda::first_id_outside(ids.i32(), ids.numel(), lo, hi, d.index, &r.id);
      return r;
    }
  r.index = cpu::first_id_outside(ids.i32(), ids.numel(), lo, hi);
  if (r.index >= 0) r.id = ids.i32()[r.index];
  return r;
}

}  // namespace tessera::kernels
