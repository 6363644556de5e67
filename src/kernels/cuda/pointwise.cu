// The CUDA pointwise kernels: elementwise arithmetic (kernels/cuda/elementwise.h), precision
// conversions (kernels/cuda/precision.h), the MLP's activations (kernels/cuda/activations.h), dropout
// (kernels/cuda/dropout.h) and RoPE (kernels/cuda/rotary.h). One
// grid-stride loop each, the per-element math shared with the CPU (kernels/math/activations.h,
// core/dtype.h's bf16 rounding, the dropout keying and core/philox.h, RoPE's pair). In one translation unit because nvcc's fixed cost per file dominates
// kernels this small.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "core/check.h"
#include "core/philox.h"
#include "kernels/cuda/activations.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/precision.h"
#include "kernels/cuda/rotary.h"
#include "kernels/math/activations.h"
#include "kernels/math/dropout.h"
#include "kernels/math/rotary.h"

namespace tessera::kernels::cuda {
namespace {

__global__ void add_into_kernel(float* a, const float* b, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) a[i] += b[i];
}

__global__ void add_bias_rows_kernel(float* y, const float* bias, int64_t n, int64_t cols) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) y[i] += bias[i % cols];
}

__global__ void fill_kernel(float* x, float value, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) x[i] = value;
}

__global__ void scale_kernel(const float* x, float s, float* out, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) out[i] = s * x[i];
}

__global__ void round_kernel(DType t, const float* in, float* out, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) out[i] = round_value(t, in[i]);
}

__global__ void encode_kernel(DType t, const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride())
    out[i] = t == DType::BF16 ? fp32_to_bf16(in[i]) : __half_as_ushort(__float2half_rn(in[i]));
}

__global__ void widen_kernel(DType t, const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride())
    out[i] = t == DType::BF16 ? bf16_to_fp32(in[i]) : __half2float(__ushort_as_half(in[i]));
}

__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n, DType round_output) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) y[i] = round_value(round_output, math::gelu_tanh(x[i]));
}

__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) dx[i] = math::gelu_tanh_backward(x[i], dy[i]);
}

// Element i of y [rows, width] is (r, c); its gate is x[r, c] and its up x[r, width + c].
__global__ void swiglu_forward_kernel(const float* x, float* y, int64_t n, int64_t width, DType round_output) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const float* gate = x + (i / width) * width + i;  // x + r * 2 * width + c
    y[i] = round_value(round_output, math::swiglu(gate[0], gate[width]));
  }
}

__global__ void swiglu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n, int64_t width) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const int64_t at = (i / width) * width + i;
    float dgate, dup;
    math::swiglu_backward(x[at], x[at + width], dy[i], dgate, dup);
    dx[at] = dgate;
    dx[at + width] = dup;
  }
}

__global__ void tanh_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) y[i] = tanhf(x[i]);
}

__global__ void tanh_backward_kernel(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = grid_index(); i < n; i += grid_stride()) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

// Element i of the region's [seq, batch, hidden] slice keeps its value (times 1 / (1 - p)) iff its
// global Philox element passes the keep test. Each thread draws the Philox block of its element (four
// words, one used): simple, and the mask is the CPU's bit for bit; sharing blocks is for the speed step.
__global__ void dropout_kernel(const float* in, float* out, int64_t n, float p, float scale, uint64_t seed,
                               uint64_t stream, DropoutRegion r) {
  const PhiloxStream philox(seed, stream);
  for (int64_t i = grid_index(); i < n; i += grid_stride()) {
    const int64_t row = i / r.hidden, h = i % r.hidden;
    const uint64_t g = math::dropout_element(r, row / r.batch, row % r.batch, h);
    out[i] = in[i] * (math::dropout_keeps(philox.bits(g), p) ? scale : 0.0f);
  }
}

void dropout_apply(const char* kernel, const float* in, float* out, float p, uint64_t seed, uint64_t stream,
                   const DropoutRegion& r) {
  math::check_dropout(p, r);
  const int64_t n = r.seq * r.batch * r.hidden;
  if (n == 0) return;
  if (p == 0.0f) {  // identity: nothing to draw
    if (in != out)
      tessera::cuda::check(cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, launch_stream()),
                           kernel);
    return;
  }
  dropout_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(in, out, n, p, 1.0f / (1.0f - p), seed, stream, r);
  check_launch(kernel);
}

// Pair i of head h of row r per thread: its frequency, angle and cos/sin in double as on the CPU
// (math/rotary.h; the CPU shares a row's cos/sin between its heads, recomputing them gives the same).
__global__ void rope_kernel(float* x, const int32_t* positions, int64_t n, int64_t heads, int64_t head_dim,
                            int64_t rot_dim, float base, math::RopeScaling scaling, double sign) {
  const int64_t half = rot_dim / 2;
  for (int64_t k = grid_index(); k < n; k += grid_stride()) {
    const int64_t i = k % half, rh = k / half;  // rh = r * heads + h
    float c, s;
    math::rope_cos_sin(static_cast<double>(positions[rh / heads]), math::rope_inv_freq(i, rot_dim, base, scaling), sign, c, s);
    float* lo = x + rh * head_dim;
    math::rope_rotate_pair(lo[i], lo[i + half], c, s);
  }
}

void rope_apply(const char* kernel, float* x, const int32_t* positions, int64_t rows, int64_t heads,
                int64_t head_dim, int64_t rot_dim, float base, const math::RopeScaling& scaling, double sign) {
  math::check_rope_dims(rot_dim, head_dim);
  const int64_t n = rows * heads * (rot_dim / 2);
  if (n == 0) return;
  rope_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(x, positions, n, heads, head_dim, rot_dim, base, scaling,
                                                             sign);
  check_launch(kernel);
}

void check_compute_type(DType t, const char* kernel) {
  TESSERA_CHECK(t == DType::F32 || t == DType::BF16 || t == DType::F16, kernel, ": ", dtype_name(t),
                " is not a floating-point compute type");
}

void check_16bit(DType t, const char* kernel) {
  TESSERA_CHECK(t == DType::BF16 || t == DType::F16, kernel, ": ", dtype_name(t), " is not a 16-bit type");
}

}  // namespace

void add_into(float* a, const float* b, int64_t n) {
  if (n == 0) return;
  add_into_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(a, b, n);
  check_launch("add_into");
}

void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t cols) {
  if (rows * cols == 0) return;
  add_bias_rows_kernel<<<grid_for(rows * cols), kThreads, 0, launch_stream()>>>(y, bias, rows * cols, cols);
  check_launch("add_bias_rows");
}

void scale(const float* x, float s, float* out, int64_t n) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(x, s, out, n);
  check_launch("scale");
}

void fill(float* x, float value, int64_t n) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(x, value, n);
  check_launch("fill");
}

void round_to(DType t, const float* in, float* out, int64_t n) {
  check_compute_type(t, "round_to");
  if (n == 0) return;
  if (t == DType::F32) {
    if (in != out)
      tessera::cuda::check(cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, launch_stream()),
                           "round_to");
    return;
  }
  round_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(t, in, out, n);
  check_launch("round_to");
}

void encode_16bit(DType t, const float* in, uint16_t* out, int64_t n) {
  check_16bit(t, "encode_16bit");
  if (n == 0) return;
  encode_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(t, in, out, n);
  check_launch("encode_16bit");
}

void widen_16bit(DType t, const uint16_t* in, float* out, int64_t n) {
  check_16bit(t, "widen_16bit");
  if (n == 0) return;
  widen_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(t, in, out, n);
  check_launch("widen_16bit");
}

void gelu_forward(const float* x, float* y, int64_t n, DType round_output) {
  check_compute_type(round_output, "gelu_forward");
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(x, y, n, round_output);
  check_launch("gelu_forward");
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(x, dy, dx, n);
  check_launch("gelu_backward");
}

void swiglu_forward(const float* x, float* y, int64_t rows, int64_t width, DType round_output) {
  check_compute_type(round_output, "swiglu_forward");
  if (rows * width == 0) return;
  swiglu_forward_kernel<<<grid_for(rows * width), kThreads, 0, launch_stream()>>>(x, y, rows * width, width,
                                                                                  round_output);
  check_launch("swiglu_forward");
}

void swiglu_backward(const float* x, const float* dy, float* dx, int64_t rows, int64_t width) {
  if (rows * width == 0) return;
  swiglu_backward_kernel<<<grid_for(rows * width), kThreads, 0, launch_stream()>>>(x, dy, dx, rows * width, width);
  check_launch("swiglu_backward");
}

void tanh_forward(const float* x, float* y, int64_t n) {
  if (n == 0) return;
  tanh_forward_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(x, y, n);
  check_launch("tanh_forward");
}

void tanh_backward(const float* y, const float* dy, float* dx, int64_t n) {
  if (n == 0) return;
  tanh_backward_kernel<<<grid_for(n), kThreads, 0, launch_stream()>>>(y, dy, dx, n);
  check_launch("tanh_backward");
}

void rope_forward(float* x, const int32_t* positions, int64_t rows, int64_t heads, int64_t head_dim,
                  int64_t rot_dim, float base, const math::RopeScaling& scaling) {
  rope_apply("rope_forward", x, positions, rows, heads, head_dim, rot_dim, base, scaling, 1.0);
}

void rope_backward(float* dx, const int32_t* positions, int64_t rows, int64_t heads, int64_t head_dim,
                   int64_t rot_dim, float base, const math::RopeScaling& scaling) {
  rope_apply("rope_backward", dx, positions, rows, heads, head_dim, rot_dim, base, scaling, -1.0);
}

void dropout_forward(const float* x, float* y, float p, uint64_t seed, uint64_t stream, const DropoutRegion& r) {
  dropout_apply("dropout_forward", x, y, p, seed, stream, r);
}

void dropout_backward(const float* dy, float* dx, float p, uint64_t seed, uint64_t stream, const DropoutRegion& r) {
  dropout_apply("dropout_backward", dy, dx, p, seed, stream, r);
}

}  // namespace tessera::kernels::cuda
