#include "kernels/cpu/linear.h"

#include <algorithm>
#include <memory>

#include "kernels/cpu/column_sums.h"
#include "kernels/math/column_sums.h"

#include "core/profiler.h"
#include "kernels/gemm.h"
#include "kernels/linear_gemms.h"
#include "kernels/precision.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {

void linear_forward(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t in,
                    int64_t out, DType input_type, bool x_rounded, bool w_rounded) {
  GemmArgs g = linear_y_gemm(GemmArgs{}, x, w, y, rows, in, out, input_type);
  g.bias = b;
  g.a_rounded = x_rounded, g.b_rounded = w_rounded;
  gemm(g);
}

namespace {
// db += column sums of dy in kernels/math/column_sums.h's order, the GPU's too (kernels/cuda/column_sums.cu):
// fp32 partial sums over chunks of rows in parallel, then the partials in chunk order in double. With
// dy_rounded, the same pass writes dy rounded to `type` there.
void bias_grad(const float* dy, float* db, int64_t rows, int64_t out, DType type, float* dy_rounded) {
  TESSERA_PROFILE_SCOPE("linear_bias_grad");
  const int64_t chunks = math::column_sum_chunks(rows);
  std::unique_ptr<float[]> partial(new float[chunks * out]);  // each chunk zeroes its own slot
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(rows * out))
  for (int64_t k = 0; k < chunks; ++k) {
    float* p = partial.get() + k * out;
    std::fill(p, p + out, 0.0f);
    for (int64_t r = k * math::kColumnSumRows; r < std::min(rows, (k + 1) * math::kColumnSumRows); ++r) {
      const float* dyr = dy + r * out;
      for (int64_t j = 0; j < out; ++j) p[j] += dyr[j];
      if (dy_rounded) round_to_serial(type, dyr, dy_rounded + r * out, out);
    }
  }
  sum_column_partials(partial.get(), chunks, out, db);
}
}  // namespace

void linear_bias_grad(const float* dy, float* db, int64_t rows, int64_t out) {
  bias_grad(dy, db, rows, out, DType::F32, nullptr);
}

void linear_backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                     int64_t rows, int64_t in, int64_t out, bool accumulate_dx,
                     DType input_type, bool x_rounded, bool w_rounded, bool dy_rounded) {
  // Under 16-bit inputs dy feeds both GEMMs: it is rounded once for the two, in the bias gradient's
  // pass where there is one (which sums the unrounded dy, as an fp32 bias gradient does).
  Tensor dy_rounded_copy;
  const float* dy_gemm = dy;
  if (dy_rounded) {
    if (db) bias_grad(dy, db, rows, out, input_type, nullptr);
  } else if (input_type != DType::F32 && dx && dw && reuse_rounded_inputs()) {
    dy_rounded_copy = Tensor::empty({rows, out}, DType::F32, Device::cpu());
    if (db)
      bias_grad(dy, db, rows, out, input_type, dy_rounded_copy.f32());
    else
      round_to(input_type, dy, dy_rounded_copy.f32(), rows * out);
    dy_gemm = dy_rounded_copy.f32();
  } else if (db) {
    bias_grad(dy, db, rows, out, input_type, nullptr);
  }
  const bool dy_is_rounded = dy_rounded || dy_gemm != dy;
  if (dx) {  // dx = dy w
    GemmArgs g = linear_dx_gemm(GemmArgs{}, dy_gemm, w, dx, rows, in, out, input_type);
    g.beta = accumulate_dx ? 1.0f : 0.0f;
    g.a_rounded = dy_is_rounded, g.b_rounded = w_rounded;
    gemm(g);
  }
  if (dw) {  // dw += dy^T x
    GemmArgs g = linear_dw_gemm(GemmArgs{}, dy_gemm, x, dw, rows, in, out, input_type);
    g.a_rounded = dy_is_rounded, g.b_rounded = x_rounded;
    gemm(g);
  }
}

}  // namespace tessera::kernels::cpu
