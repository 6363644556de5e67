// LayerNorm and RMSNorm on the GPU (kernels/cuda/norms.h). Forward and dx: one block per row, the row's
// sums in double reduced across the block (launch.cuh's block_sum), then the CPU's per-element formulas
// (kernels/cpu/norms.cc). dw and db: one thread per column, summing its column over the rows in row
// order, in double, so that the result does not depend on the launch. RMSNorm is LayerNorm without the
// mean: the same kernels with mean == nullptr.
#include <cuda_runtime.h>

#include "core/check.h"
#include "kernels/cuda/launch.cuh"
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

// dw[c] += sum_r dy[r, c] * xhat[r, c], db[c] += sum_r dy[r, c] (db may be null), one thread per column.
__global__ void norm_weight_grad_kernel(const float* dy, const float* x, const float* mean, const float* rstd,
                                        float* dw, float* db, int64_t rows, int64_t cols) {
  const int64_t c = grid_index();
  if (c >= cols) return;
  double dw_sum = 0, db_sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float g = dy[r * cols + c];
    const float xhat = (x[r * cols + c] - (mean ? mean[r] : 0.0f)) * rstd[r];
    dw_sum += g * xhat;
    db_sum += g;
  }
  dw[c] += static_cast<float>(dw_sum);
  if (db) db[c] += static_cast<float>(db_sum);
}

void forward(const char* kernel, const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
             int64_t rows, int64_t cols, float eps, DType round_output) {
  TESSERA_CHECK(round_output == DType::F32 || round_output == DType::BF16 || round_output == DType::F16, kernel,
                ": ", dtype_name(round_output), " is not a floating-point compute type");
  if (rows == 0) return;
  norm_forward_kernel<<<static_cast<unsigned>(rows), kThreads>>>(x, w, b, y, mean, rstd, cols, eps, round_output);
  check_launch(kernel);
}

void backward(const char* kernel, const float* dy, const float* x, const float* w, const float* mean,
              const float* rstd, float* dx, float* dw, float* db, int64_t rows, int64_t cols) {
  if (rows == 0) return;
  norm_dx_kernel<<<static_cast<unsigned>(rows), kThreads>>>(dy, x, w, mean, rstd, dx, cols);
  check_launch(kernel);
  norm_weight_grad_kernel<<<static_cast<unsigned>((cols + kThreads - 1) / kThreads), kThreads>>>(dy, x, mean, rstd,
                                                                                                 dw, db, rows, cols);
  check_launch(kernel);
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
