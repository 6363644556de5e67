// LayerNorm and RMSNorm on the GPU (kernels/cuda/norms.h). Forward and dx: one block per row, the row's
// sums in double reduced across the block (launch.cuh's block_sum), then the CPU's per-element formulas
// (kernels/cpu/norms.cc). dw and db: column sums in kernels/math/column_sums.h's fixed order, the CPU's
// (a thread per chunk of 32 rows and column, many blocks, then the partials in order): the same bits as
// the CPU, whatever the launch. RMSNorm is LayerNorm without the mean: the same kernels with
// mean == nullptr.
#include <cuda_runtime.h>

#include "core/check.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/column_sums.h"
#include "kernels/cuda/norms.h"

namespace tessera::kernels::cuda {
namespace {

// y = (x - mean) * rstd * w (+ b); mean == nullptr: RMSNorm (no centring, no bias).
__global__ void norm_forward_kernel(const float* x, const float* w, const float* b, float* y, float* mean,
                                    float* rstd, int64_t cols, float eps, DType round_output) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * cols;
  float* yr = y + r * cols;
  double m = 0;
  if (mean) {
    double sum = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += xr[c];
    m = block_sum(sum, scratch) / static_cast<double>(cols);
  }
  double sq = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const double d = xr[c] - m;
    sq += d * d;
  }
  const double s = 1.0 / sqrt(block_sum(sq, scratch) / static_cast<double>(cols) + eps);
  const float mf = static_cast<float>(m), sf = static_cast<float>(s);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = mean ? (xr[c] - mf) * sf * w[c] : xr[c] * sf * w[c];
    if (b) v += b[c];
    yr[c] = round_value(round_output, v);
  }
  if (threadIdx.x == 0) {
    if (mean) mean[r] = mf;
    rstd[r] = sf;
  }
}

// dx += rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w; RMSNorm (mean == nullptr) drops
// the mean(g) term.
__global__ void norm_dx_kernel(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                               float* dx, int64_t cols) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const float* dyr = dy + r * cols;
  const float* xr = x + r * cols;
  float* dxr = dx + r * cols;
  const float m = mean ? mean[r] : 0.0f, s = rstd[r];
  double g_sum = 0, gx_sum = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float g = dyr[c] * w[c];
    g_sum += g;
    gx_sum += g * ((xr[c] - m) * s);
  }
  const float g_mean = mean ? static_cast<float>(block_sum(g_sum, scratch) / static_cast<double>(cols)) : 0.0f;
  const float gx_mean = static_cast<float>(block_sum(gx_sum, scratch) / static_cast<double>(cols));
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (xr[c] - m) * s;
    dxr[c] += s * (dyr[c] * w[c] - g_mean - xhat * gx_mean);
  }
}

// Step 1 of the weight gradients' column sums: dw_part[k, c] = the fp32 sum over chunk k's rows of
// dy * xhat, db_part[k, c] that of dy (db_part may be null), a thread per (chunk, column).
__global__ void norm_weight_grad_partials_kernel(const float* dy, const float* x, const float* mean,
                                                 const float* rstd, float* dw_part, float* db_part, int64_t rows,
                                                 int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int64_t k = blockIdx.y; k * math::kColumnSumRows < rows; k += gridDim.y) {
    const int64_t end = min(rows, (k + 1) * math::kColumnSumRows);
    float dw_sum = 0.0f, db_sum = 0.0f;
    for (int64_t r = k * math::kColumnSumRows; r < end; ++r) {
      const float g = dy[r * cols + c];
      dw_sum = __fadd_rn(dw_sum, math::norm_weight_grad_term(g, x[r * cols + c], mean ? mean[r] : 0.0f, rstd[r]));
      db_sum = __fadd_rn(db_sum, g);
    }
    dw_part[k * cols + c] = dw_sum;
    if (db_part) db_part[k * cols + c] = db_sum;
  }
}

void forward(const char* kernel, const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
             int64_t rows, int64_t cols, float eps, DType round_output) {
  TESSERA_CHECK(round_output == DType::F32 || round_output == DType::BF16 || round_output == DType::F16, kernel,
                ": ", dtype_name(round_output), " is not a floating-point compute type");
  if (rows == 0) return;
  norm_forward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, launch_stream()>>>(x, w, b, y, mean, rstd, cols, eps,
                                                                                     round_output);
  check_launch(kernel);
}

void backward(const char* kernel, const float* dy, const float* x, const float* w, const float* mean,
              const float* rstd, float* dx, float* dw, float* db, int64_t rows, int64_t cols) {
  if (rows == 0) return;
  norm_dx_kernel<<<static_cast<unsigned>(rows), kThreads, 0, launch_stream()>>>(dy, x, w, mean, rstd, dx, cols);
  check_launch(kernel);
  if (cols == 0) return;
  const int64_t chunks = math::column_sum_chunks(rows);
  DeviceScratch dw_part(chunks * cols), db_part(db ? chunks * cols : 1);
  norm_weight_grad_partials_kernel<<<column_partials_grid(rows, cols), kThreads, 0, launch_stream()>>>(
      dy, x, mean, rstd, dw_part.data(), db ? db_part.data() : nullptr, rows, cols);
  check_launch(kernel);
  sum_column_partials(dw_part.data(), chunks, cols, dw);
  if (db) sum_column_partials(db_part.data(), chunks, cols, db);
}

}  // namespace

void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                       int64_t rows, int64_t cols, float eps, DType round_output) {
  forward("layernorm_forward", x, w, b, y, mean, rstd, rows, cols, eps, round_output);
}

void layernorm_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                        float* dx, float* dw, float* db, int64_t rows, int64_t cols) {
  backward("layernorm_backward", dy, x, w, mean, rstd, dx, dw, db, rows, cols);
}

void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t cols, float eps,
                     DType round_output) {
  forward("rmsnorm_forward", x, w, nullptr, y, nullptr, rstd, rows, cols, eps, round_output);
}

void rmsnorm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                      int64_t rows, int64_t cols) {
  backward("rmsnorm_backward", dy, x, w, nullptr, rstd, dx, dw, nullptr, rows, cols);
}

}  // namespace tessera::kernels::cuda
