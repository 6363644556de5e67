#include "kernels/adamw.h"

#include "kernels/cpu/adamw.h"
#include "kernels/cuda/adamw.h"
#include "kernels/device_dispatch.h"
#include "kernels/tensor_ops.h"

#include <cstring>

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

namespace {

void check_scalars(const char* kernel, const Tensor& scalars) {
  TESSERA_CHECK(scalars.dtype() == DType::I64 && scalars.numel() == kStepScalarWords, kernel, ": the step's scalars are ",
                dtype_name(scalars.dtype()), " ", shape_str(scalars.shape()), "; int64 [", kStepScalarWords,
                "] expected");
}

}  // namespace

void grad_norm_and_clip(const Tensor& x, const Tensor& scalars, float clip_grad, float loss_scale) {
  const char* kernel = "grad_norm_and_clip";
  const Device d = kernel_device(kernel, {&x, &scalars}, Impl::kCpuAndCuda);
  check_scalars(kernel, scalars);
  static_assert(sizeof(StepScalars) <= kStepScalarWords * sizeof(int64_t));
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::grad_norm_and_clip(x.f32(), x.numel(), clip_grad, loss_scale,
                                      static_cast<StepScalars*>(scalars.raw()), d.index);
  const StepScalars s = cpu::grad_norm_and_clip(x.f32(), x.numel(), clip_grad, loss_scale);
  std::memcpy(scalars.raw(), &s, sizeof(s));
}

StepScalars read_step_scalars(const Tensor& scalars) {
  check_scalars("read_step_scalars", scalars);
  const Tensor host = to_device(scalars, Device::cpu());
  StepScalars s;
  std::memcpy(&s, host.host_raw(), sizeof(s));
  return s;
}

AdamWSegmentTable adamw_segment_table(const std::vector<AdamWSegment>& segments, int64_t params, int64_t state,
                                      Device device) {
  const int64_t rows = static_cast<int64_t>(segments.size());
  Tensor table = Tensor::empty({rows, 5}, DType::I64, Device::cpu());
  int64_t packed = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const AdamWSegment& s = segments[r];
    TESSERA_CHECK(s.begin >= 0 && s.length >= 0 && s.state >= 0 && s.begin + s.length <= params &&
                      s.state + s.length <= state,
                  "adamw_segment_table: segment ", r, " (begin ", s.begin, ", length ", s.length, ", state ", s.state,
                  ") is outside ", params, " parameters / ", state, " moments");
    int64_t* row = table.host_i64() + 5 * r;
    row[0] = packed, row[1] = s.begin, row[2] = s.length, row[3] = s.state, row[4] = s.decay ? 1 : 0;
    packed += s.length;
  }
  return {to_device(table, device), packed, params, state};
}

void adamw_multi_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                      const AdamWSegmentTable& table, const AdamWHyper& h, const Tensor& scalars) {
  const char* kernel = "adamw_multi_step";
  const Device d =
      kernel_device(kernel, {&param, &grad, &exp_avg, &exp_avg_sq, &table.rows, &scalars}, Impl::kCpuAndCuda);
  check_scalars(kernel, scalars);
  TESSERA_CHECK(grad.numel() == param.numel() && exp_avg.numel() == exp_avg_sq.numel() &&
                    param.numel() == table.params && exp_avg.numel() == table.state,
                kernel, ": ", param.numel(), " parameters with ", grad.numel(), " gradients and ", exp_avg.numel(), "/",
                exp_avg_sq.numel(), " moments; the segment table is for ", table.params, " parameters and ",
                table.state, " moments");
  const int64_t segments = table.rows.dim(0);
  if constexpr (kWithCuda)
    if (on_cuda(d))
      return cuda::adamw_multi_step(param.f32(), grad.f32(), exp_avg.f32(), exp_avg_sq.f32(), table.rows.i64(),
                                    segments, table.total, h, static_cast<const StepScalars*>(scalars.raw()));
  StepScalars s;
  std::memcpy(&s, scalars.raw(), sizeof(s));
  cpu::adamw_multi_step(param.f32(), grad.f32(), exp_avg.f32(), exp_avg_sq.f32(), table.rows.i64(), segments, h,
                        s.clip_scale);
}

}  // namespace tessera::kernels
