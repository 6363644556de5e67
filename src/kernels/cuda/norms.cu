// LayerNorm and RMSNorm on the GPU (kernels/cuda/norms.h), the CPU's loops (kernels/cpu/norms.cc) with
// the same arithmetic. RMSNorm is LayerNorm without the mean: the same kernels with mean == nullptr.
//   Forward: one block per row, the row's sums in double reduced across the block (launch.cuh's
//   block_sum), then the CPU's per-element formulas; the residual forms add the residual connection
//   into the row as they read it, and write the sum back, in the same kernel.
//   Backward: two launches. The first takes one block per chunk of kColumnSumRows rows (kernels/math/
//   column_sums.h) and walks the chunk's rows in order, as the CPU's chunk loop: each row's dx, and its
//   weight-gradient terms added to the chunk's fp32 partials, a thread per column, in row order. The
//   second (kernels/cuda/column_sums.h) adds the partials of dw and db up in chunk order: the CPU's bits,
//   whatever the launch. Step 1 read dy and x three times over three kernels (dx, then the partials,
//   each reading them whole); this reads them once per row from the same block, where the second read
//   of a row hits the cache.
#include <cuda_runtime.h>

#include "core/check.h"
#include "kernels/cuda/column_sums.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/norms.h"
#include "kernels/math/column_sums.h"

namespace tessera::kernels::cuda {
namespace {

// The shared memory a block may take without opting in, static and dynamic together: a launch whose
// dynamic bytes exceed this less the kernel's static ones fails (cudaErrorInvalidValue) unless
// cudaFuncAttributeMaxDynamicSharedMemorySize was raised.
constexpr size_t kDefaultSharedBytes = 48 * 1024;
// norm_backward_kernel's static shared memory: block_sum_pair's scratch.
constexpr int kBackwardScratch = 64;
constexpr size_t kBackwardStaticShared = kBackwardScratch * sizeof(double);

// y = (x - mean) * rstd * w (+ b); mean == nullptr: RMSNorm (no centring, no bias). y16 (y null): the
// output written as its 16-bit encodings of type round_output instead, no fp32 output at all. With a
// residual, the row normalised is x + residual (one fp32 add per element, kernels::add_into's), written to x_out
// as the last pass reads it (x_out may be x: each element is read and written by one thread only).
__global__ void norm_forward_kernel(const float* x, const float* residual, float* x_out, const float* w,
                                    const float* b, float* y, uint16_t* y16, float* mean, float* rstd, int64_t cols,
                                    float eps, DType round_output) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * cols;
  const float* rr = residual ? residual + r * cols : nullptr;
  float* yr = y ? y + r * cols : nullptr;
  uint16_t* yr16 = y16 ? y16 + r * cols : nullptr;
  auto load = [&](int64_t c) { return rr ? xr[c] + rr[c] : xr[c]; };
  double m = 0;
  if (mean) {
    double sum = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += load(c);
    m = block_sum(sum, scratch) / static_cast<double>(cols);
  }
  double sq = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const double d = load(c) - m;
    sq += d * d;
  }
  const double s = 1.0 / sqrt(block_sum(sq, scratch) / static_cast<double>(cols) + eps);
  const float mf = static_cast<float>(m), sf = static_cast<float>(s);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xc = load(c);
    float v = mean ? (xc - mf) * sf * w[c] : xc * sf * w[c];
    if (b) v += b[c];
    if (yr16) yr16[c] = encode_value(round_output, v);  // the encoding of round_value(round_output, v)
    else yr[c] = round_value(round_output, v);
    if (rr) x_out[r * cols + c] = xc;
  }
  if (threadIdx.x == 0) {
    if (mean) mean[r] = mf;
    rstd[r] = sf;
  }
}

// launch.cuh's block_sum of two values at once (one pair of barriers instead of two): each comes out with
// the bits block_sum gives it. `scratch` is __shared__ double[64].
__device__ inline void block_sum_pair(double& a, double& b, double* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();  // the previous row's readers are done with scratch
  if (lane == 0) scratch[warp] = a, scratch[32 + warp] = b;
  __syncthreads();
  a = lane < warps ? scratch[lane] : 0.0;
  b = lane < warps ? scratch[32 + lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
}

// Chunk blockIdx.x's rows in order: dx += rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w
// (RMSNorm, mean == nullptr, drops the mean(g) term), and the chunk's partials dw_part[k, c] = the fp32
// sum in row order of dy * xhat, db_part[k, c] that of dy (db_part may be null). A thread owns columns
// threadIdx.x + j * blockDim.x throughout, so its partials need no barrier; they are kept in shared
// memory (dynamic: cols floats each) where it fits, else in dw_part/db_part themselves.
__global__ void norm_backward_kernel(const float* dy, const float* x, const float* w, const float* mean,
                                     const float* rstd, float* dx, float* dw_part, float* db_part, int64_t rows,
                                     int64_t cols, bool partials_in_shared) {
  extern __shared__ float shared_partials[];
  __shared__ double scratch[kBackwardScratch];
  const int64_t k = blockIdx.x;
  float* dw_acc = partials_in_shared ? shared_partials : dw_part + k * cols;
  float* db_acc = !db_part ? nullptr : partials_in_shared ? shared_partials + cols : db_part + k * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    dw_acc[c] = 0.0f;
    if (db_acc) db_acc[c] = 0.0f;
  }
  const int64_t end = min(rows, (k + 1) * math::kColumnSumRows);
  for (int64_t r = k * math::kColumnSumRows; r < end; ++r) {
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
    block_sum_pair(g_sum, gx_sum, scratch);
    const float g_mean = mean ? static_cast<float>(g_sum / static_cast<double>(cols)) : 0.0f;
    const float gx_mean = static_cast<float>(gx_sum / static_cast<double>(cols));
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float g = dyr[c], xc = xr[c];
      const float xhat = (xc - m) * s;
      dxr[c] += s * (g * w[c] - g_mean - xhat * gx_mean);
      dw_acc[c] = __fadd_rn(dw_acc[c], math::norm_weight_grad_term(g, xc, m, s));
      if (db_acc) db_acc[c] = __fadd_rn(db_acc[c], g);
    }
  }
  if (partials_in_shared)
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      dw_part[k * cols + c] = dw_acc[c];
      if (db_acc) db_part[k * cols + c] = db_acc[c];
    }
}

// The dynamic shared memory norm_backward_kernel takes for `bytes` of partials: all of it where the
// device allows (opting in above 48 KiB), else none (the partials then live in global memory).
size_t backward_shared_bytes(size_t bytes) {
  if (bytes + kBackwardStaticShared <= kDefaultSharedBytes) return bytes;
  int device = 0, optin = 0;
  tessera::cuda::check(cudaGetDevice(&device), "cudaGetDevice");
  tessera::cuda::check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                       "cudaDeviceGetAttribute(cudaDevAttrMaxSharedMemoryPerBlockOptin)");
  if (bytes + kBackwardStaticShared > static_cast<size_t>(optin)) return 0;
  tessera::cuda::check(cudaFuncSetAttribute(norm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)),
                       "cudaFuncSetAttribute(norm_backward_kernel)");
  return bytes;
}

void forward(const char* kernel, const float* x, const float* residual, float* x_out, const float* w, const float* b,
             NormOutput y, float* mean, float* rstd, int64_t rows, int64_t cols, float eps, DType round_output) {
  TESSERA_CHECK(round_output == DType::F32 || round_output == DType::BF16 || round_output == DType::F16, kernel,
                ": ", dtype_name(round_output), " is not a floating-point compute type");
  TESSERA_CHECK((y.f32 == nullptr) != (y.encoded == nullptr), kernel, ": one output, fp32 or 16-bit");
  TESSERA_CHECK(y.encoded == nullptr || round_output != DType::F32, kernel,
                ": a 16-bit output needs its type as round_output");
  if (rows == 0) return;
  norm_forward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, launch_stream()>>>(
      x, residual, x_out, w, b, y.f32, y.encoded, mean, rstd, cols, eps, round_output);
  check_launch(kernel);
}

void backward(const char* kernel, const float* dy, const float* x, const float* w, const float* mean,
              const float* rstd, float* dx, float* dw, float* db, int64_t rows, int64_t cols) {
  if (cols == 0) return;
  // Before the scratch is taken: no usable GPU gives an error naming this kernel, as a launch's would.
  int device = 0;
  tessera::cuda::check(cudaGetDevice(&device), kernel);
  const int64_t chunks = math::column_sum_chunks(rows);
  if (chunks == 0) return sum_column_partials(nullptr, chunks, cols, dw, nullptr, db);  // adds 0, as the CPU
  DeviceScratch dw_part(chunks * cols), db_part(db ? chunks * cols : 1);
  const size_t shared = backward_shared_bytes(static_cast<size_t>(cols) * sizeof(float) * (db ? 2 : 1));
  norm_backward_kernel<<<static_cast<unsigned>(chunks), kThreads, shared, launch_stream()>>>(
      dy, x, w, mean, rstd, dx, dw_part.data(), db ? db_part.data() : nullptr, rows, cols, shared > 0);
  check_launch(kernel);
  sum_column_partials(dw_part.data(), chunks, cols, dw, db ? db_part.data() : nullptr, db);
}

}  // namespace

void layernorm_forward(const float* x, const float* w, const float* b, NormOutput y, float* mean, float* rstd,
                       int64_t rows, int64_t cols, float eps, DType round_output) {
  forward("layernorm_forward", x, nullptr, nullptr, w, b, y, mean, rstd, rows, cols, eps, round_output);
}

void residual_layernorm_forward(float* x, const float* residual, const float* w, const float* b, NormOutput y,
                                float* mean, float* rstd, int64_t rows, int64_t cols, float eps, DType round_output) {
  forward("residual_layernorm_forward", x, residual, x, w, b, y, mean, rstd, rows, cols, eps, round_output);
}

void layernorm_backward(const float* dy, const float* x, const float* w, const float* mean, const float* rstd,
                        float* dx, float* dw, float* db, int64_t rows, int64_t cols) {
  backward("layernorm_backward", dy, x, w, mean, rstd, dx, dw, db, rows, cols);
}

void rmsnorm_forward(const float* x, const float* w, NormOutput y, float* rstd, int64_t rows, int64_t cols, float eps,
                     DType round_output) {
  forward("rmsnorm_forward", x, nullptr, nullptr, w, nullptr, y, nullptr, rstd, rows, cols, eps, round_output);
}

void residual_rmsnorm_forward(float* x, const float* residual, const float* w, NormOutput y, float* rstd, int64_t rows,
                              int64_t cols, float eps, DType round_output) {
  forward("residual_rmsnorm_forward", x, residual, x, w, nullptr, y, nullptr, rstd, rows, cols, eps, round_output);
}

void rmsnorm_backward(const float* dy, const float* x, const float* w, const float* rstd, float* dx, float* dw,
                      int64_t rows, int64_t cols) {
  backward("rmsnorm_backward", dy, x, w, nullptr, rstd, dx, dw, nullptr, rows, cols);
}

}  // namespace tessera::kernels::cuda
