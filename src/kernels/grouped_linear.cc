#include "kernels/grouped_linear.h"

#include "kernels/cpu/grouped_linear.h"
#include "kernels/device_dispatch.h"
#include "kernels/linear.h"

namespace tessera::kernels {
namespace {

// The groups, rows and features of a [groups, rows, features] operand, checked against the layers.
struct GroupedShape {
  int64_t groups, rows, in, out;
};

GroupedShape grouped_shape(const char* kernel, const Tensor& x, const std::vector<Tensor>& w) {
  TESSERA_CHECK(x.ndim() == 3, kernel, ": x ", shape_str(x.shape()), " is not [groups, rows, in]");
  TESSERA_CHECK(static_cast<int64_t>(w.size()) == x.dim(0), kernel, ": ", w.size(), " weights for ", x.dim(0),
                " groups");
  TESSERA_CHECK(!w.empty(), kernel, ": no groups");
  const int64_t out = w[0].dim(0), in = w[0].dim(1);
  TESSERA_CHECK(in == x.dim(2), kernel, ": weight ", shape_str(w[0].shape()), " does not take x ", shape_str(x.shape()));
  for (const Tensor& t : w) {
    kernel_device(kernel, {&x, &t}, Impl::kCpuAndCuda);
    TESSERA_CHECK(t.shape() == w[0].shape(), kernel, ": weights ", shape_str(w[0].shape()), " and ",
                  shape_str(t.shape()), " differ");
  }
  return {x.dim(0), x.dim(1), in, out};
}

// The data of each tensor (each `numel` elements, on x's device), or none for an empty list.
template <typename P>
std::vector<P*> pointers(const char* kernel, const char* what, const std::vector<Tensor>& ts, int64_t numel,
                         const Tensor& x) {
  std::vector<P*> out;
  for (const Tensor& t : ts) {
    kernel_device(kernel, {&x, &t});
    check_numel(kernel, what, t, numel);
    out.push_back(t.f32());
  }
  return out;
}

// Group g of a [groups, rows, d] operand as [rows, d] (undefined stays undefined).
Tensor group(const Tensor& t, int64_t g) {
  if (!t.defined()) return t;
  return t.narrow(g, 1).view({t.dim(1), t.dim(2)});
}
Tensor item(const std::vector<Tensor>& ts, int64_t g) { return ts.empty() ? Tensor() : ts[g]; }

}  // namespace

void grouped_linear_forward(const Tensor& x, const std::vector<Tensor>& w, const std::vector<Tensor>& b,
                            const Tensor& y, DType input_type, bool x_rounded) {
  const char* kernel = "grouped_linear_forward";
  const Device d = kernel_device(kernel, {&x, &y}, Impl::kCpuAndCuda);
  const GroupedShape s = grouped_shape(kernel, x, w);
  check_numel(kernel, "y", y, s.groups * s.rows * s.out);
  TESSERA_CHECK(b.empty() || b.size() == w.size(), kernel, ": ", b.size(), " biases for ", w.size(), " weights");
  if (on_cuda(d)) {  // one cuBLASLt product per expert (linear.h); a grouped GEMM is for the speed step
    const Tensor y3 = y.view({s.groups, s.rows, s.out});
    for (int64_t g = 0; g < s.groups; ++g)
      linear_forward(group(x, g), w[g], item(b, g), group(y3, g), input_type, x_rounded);
    return;
  }
  cpu::grouped_linear_forward(x.f32(), pointers<const float>(kernel, "weight", w, s.out * s.in, x),
                              pointers<const float>(kernel, "bias", b, s.out, x), y.f32(), s.rows, s.in, s.out,
                              input_type, x_rounded);
}

void grouped_linear_backward(const Tensor& dy, const Tensor& x, const std::vector<Tensor>& w, const Tensor& dx,
                             const std::vector<Tensor>& dw, const std::vector<Tensor>& db, DType input_type,
                             bool x_rounded, bool dy_rounded) {
  const char* kernel = "grouped_linear_backward";
  const Device d = kernel_device(kernel, {&dy, &x, &dx}, Impl::kCpuAndCuda);
  const GroupedShape s = grouped_shape(kernel, x, w);
  check_numel(kernel, "dy", dy, s.groups * s.rows * s.out);
  if (dx.defined()) check_numel(kernel, "dx", dx, s.groups * s.rows * s.in);
  TESSERA_CHECK((dw.empty() || dw.size() == w.size()) && (db.empty() || db.size() == w.size()), kernel, ": ",
                dw.size(), " weight and ", db.size(), " bias gradients for ", w.size(), " weights");
  if (on_cuda(d)) {
    const Tensor dy3 = dy.view({s.groups, s.rows, s.out});
    const Tensor dx3 = dx.defined() ? dx.view({s.groups, s.rows, s.in}) : dx;
    for (int64_t g = 0; g < s.groups; ++g)
      linear_backward(group(dy3, g), group(x, g), w[g], group(dx3, g), item(dw, g), item(db, g), input_type,
                      x_rounded, false, dy_rounded);
    return;
  }
  cpu::grouped_linear_backward(dy.f32(), x.f32(), pointers<const float>(kernel, "weight", w, s.out * s.in, x),
                               f32_or_null(dx), pointers<float>(kernel, "dw", dw, s.out * s.in, x),
                               pointers<float>(kernel, "db", db, s.out, x), s.rows, s.in, s.out, input_type,
                               x_rounded, dy_rounded);
}

Tensor pad_row_groups(const Tensor& x, const std::vector<int64_t>& counts, int64_t rows) {
  const Device d = kernel_device("pad_row_groups", {&x}, Impl::kCpuAndCuda);
  int64_t total = 0;
  for (int64_t c : counts) {
    TESSERA_CHECK(c >= 0 && c <= rows, "pad_row_groups: a group of ", c, " rows does not fit in ", rows);
    total += c;
  }
  TESSERA_CHECK(x.ndim() == 2 && x.dim(0) == total, "pad_row_groups: x ", shape_str(x.shape()), " is not the [",
                total, ", d] rows of the groups");
  const int64_t cols = x.dim(1), groups = static_cast<int64_t>(counts.size());
  if (on_cuda(d)) {  // device copies of each group's rows (Tensor::copy_from), zeros after them
    Tensor padded = Tensor::zeros({groups, rows, cols}, DType::F32, d);
    const Tensor flat = padded.view({groups * rows, cols});
    int64_t at = 0;
    for (int64_t g = 0; g < groups; at += counts[g], ++g)
      if (counts[g] > 0) flat.narrow(g * rows, counts[g]).copy_from(x.narrow(at, counts[g]));
    return padded;
  }
  Tensor padded = Tensor::empty({groups, rows, cols}, DType::F32, Device::cpu());
  cpu::pad_row_groups(x.f32(), counts, rows, cols, padded.f32());
  return padded;
}

void unpad_row_groups(const Tensor& padded, const std::vector<int64_t>& counts, const Tensor& out) {
  const Device device = kernel_device("unpad_row_groups", {&padded, &out}, Impl::kCpuAndCuda);
  TESSERA_CHECK(padded.ndim() == 3 && padded.dim(0) == static_cast<int64_t>(counts.size()),
                "unpad_row_groups: padded ", shape_str(padded.shape()), " is not [", counts.size(), " groups, rows, d]");
  const int64_t rows = padded.dim(1), d = padded.dim(2);
  int64_t total = 0;
  for (int64_t c : counts) {
    TESSERA_CHECK(c >= 0 && c <= rows, "unpad_row_groups: a group of ", c, " rows does not fit in ", rows);
    total += c;
  }
  check_numel("unpad_row_groups", "out", out, total * d);
  if (on_cuda(device)) {
    const Tensor flat = padded.view({padded.dim(0) * rows, d}), rows_out = out.view({total, d});
    int64_t at = 0;
    for (size_t g = 0; g < counts.size(); at += counts[g], ++g)
      if (counts[g] > 0) rows_out.narrow(at, counts[g]).copy_from(flat.narrow(static_cast<int64_t>(g) * rows, counts[g]));
    return;
  }
  cpu::unpad_row_groups(padded.f32(), counts, rows, d, out.f32());
}

}  // namespace tessera::kernels
