#include "kernels/cpu/grouped_linear.h"

#include <cstring>
#include <optional>

#include "core/profiler.h"
#include "core/tensor.h"
#include "kernels/cpu/linear.h"
#include "kernels/gemm.h"
#include "kernels/precision.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {
namespace {

// The stride (in elements) at which the matrices p[0], p[1], ... lie one after another, each at least
// `span` elements before the next (so that outputs do not overlap); nullopt where they do not.
template <typename P>
std::optional<int64_t> even_stride(const std::vector<P*>& p, int64_t span) {
  if (p.size() < 2) return 0;
  const int64_t stride = p[1] - p[0];
  if (stride < span) return std::nullopt;
  for (size_t g = 2; g < p.size(); ++g)
    if (p[g] - p[g - 1] != stride) return std::nullopt;
  return stride;
}

}  // namespace

void grouped_linear_forward(const float* x, const std::vector<const float*>& w, const std::vector<const float*>& b,
                            float* y, int64_t rows, int64_t in, int64_t out, DType input_type, bool x_rounded) {
  TESSERA_PROFILE_SCOPE("grouped_linear_forward");
  const int64_t groups = static_cast<int64_t>(w.size());
  TESSERA_CHECK(b.empty() || b.size() == w.size(), "grouped_linear_forward: ", b.size(), " biases for ", groups,
                " weights");
  const std::optional<int64_t> w_stride = even_stride(w, out * in);
  const std::optional<int64_t> b_stride = b.empty() ? std::optional<int64_t>(0) : even_stride(b, out);
  if (!w_stride || !b_stride) {
    for (int64_t g = 0; g < groups; ++g)
      linear_forward(x + g * rows * in, w[g], b.empty() ? nullptr : b[g], y + g * rows * out, rows, in, out,
                     input_type, x_rounded);
    return;
  }
  if (groups == 0) return;
  GemmArgs g;  // y_g = x_g w_g^T + b_g
  g.trans_b = Trans::T;
  g.m = rows, g.n = out, g.k = in;
  g.a = x, g.lda = in, g.stride_a = rows * in;
  g.b = w[0], g.ldb = in, g.stride_b = *w_stride;
  g.c = y, g.ldc = out, g.stride_c = rows * out;
  g.bias = b.empty() ? nullptr : b[0], g.stride_bias = *b_stride;
  g.batch = groups;
  g.input_type = input_type;
  g.a_rounded = x_rounded;
  gemm(g);
}

void grouped_linear_backward(const float* dy, const float* x, const std::vector<const float*>& w, float* dx,
                             const std::vector<float*>& dw, const std::vector<float*>& db, int64_t rows, int64_t in,
                             int64_t out, DType input_type, bool x_rounded, bool dy_rounded) {
  TESSERA_PROFILE_SCOPE("grouped_linear_backward");
  const int64_t groups = static_cast<int64_t>(w.size());
  TESSERA_CHECK((dw.empty() || dw.size() == w.size()) && (db.empty() || db.size() == w.size()),
                "grouped_linear_backward: ", dw.size(), " weight and ", db.size(), " bias gradients for ", groups,
                " weights");
  for (size_t g = 0; g < db.size(); ++g) linear_bias_grad(dy + g * rows * out, db[g], rows, out);
  const std::optional<int64_t> w_stride = even_stride(w, out * in);
  const std::optional<int64_t> dw_stride = dw.empty() ? std::optional<int64_t>(0) : even_stride(dw, out * in);
  if (!w_stride || !dw_stride) {
    for (int64_t g = 0; g < groups; ++g)
      linear_backward(dy + g * rows * out, x + g * rows * in, w[g], dx ? dx + g * rows * in : nullptr,
                      dw.empty() ? nullptr : dw[g], nullptr, rows, in, out, false, input_type, x_rounded, false,
                      dy_rounded);
    return;
  }
  if (groups == 0) return;
  // Under 16-bit inputs dy feeds both products: rounded once for the two.
  Tensor dy_rounded_copy;
  const float* dy_gemm = dy;
  if (input_type != DType::F32 && !dy_rounded && dx && !dw.empty() && reuse_rounded_inputs()) {
    dy_rounded_copy = Tensor::empty({groups * rows * out}, DType::F32, Device::cpu());
    round_to(input_type, dy, dy_rounded_copy.f32(), groups * rows * out);
    dy_gemm = dy_rounded_copy.f32();
  }
  const bool dy_is_rounded = dy_rounded || dy_gemm != dy;
  if (dx) {  // dx_g = dy_g w_g
    GemmArgs g;
    g.m = rows, g.n = in, g.k = out;
    g.a = dy_gemm, g.lda = out, g.stride_a = rows * out;
    g.b = w[0], g.ldb = in, g.stride_b = *w_stride;
    g.c = dx, g.ldc = in, g.stride_c = rows * in;
    g.batch = groups;
    g.input_type = input_type;
    g.a_rounded = dy_is_rounded;
    gemm(g);
  }
  if (!dw.empty()) {  // dw_g += dy_g^T x_g
    GemmArgs g;
    g.trans_a = Trans::T;
    g.m = out, g.n = in, g.k = rows;
    g.a = dy_gemm, g.lda = out, g.stride_a = rows * out;
    g.b = x, g.ldb = in, g.stride_b = rows * in;
    g.c = dw[0], g.ldc = in, g.stride_c = *dw_stride;
    g.beta = 1.0f;
    g.batch = groups;
    g.input_type = input_type;
    g.a_rounded = dy_is_rounded, g.b_rounded = x_rounded;
    gemm(g);
  }
}

void pad_row_groups(const float* x, const std::vector<int64_t>& counts, int64_t rows, int64_t d, float* padded) {
  const int64_t groups = static_cast<int64_t>(counts.size());
  std::vector<int64_t> first(counts.size() + 1, 0);
  for (size_t g = 0; g < counts.size(); ++g) first[g + 1] = first[g] + counts[g];
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(groups * rows * d))
  for (int64_t r = 0; r < groups * rows; ++r) {
    const int64_t g = r / rows, i = r % rows;
    float* to = padded + r * d;
    if (i < counts[g])
      std::memcpy(to, x + (first[g] + i) * d, static_cast<size_t>(d) * sizeof(float));
    else
      std::memset(to, 0, static_cast<size_t>(d) * sizeof(float));
  }
}

void unpad_row_groups(const float* padded, const std::vector<int64_t>& counts, int64_t rows, int64_t d, float* out) {
  int64_t at = 0;
  for (size_t g = 0; g < counts.size(); at += counts[g], ++g)
    std::memcpy(out + at * d, padded + static_cast<int64_t>(g) * rows * d,
                static_cast<size_t>(counts[g] * d) * sizeof(float));
}

}  // namespace tessera::kernels::cpu
