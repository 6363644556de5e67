#include "kernels/precision.h"

#include "core/check.h"
#include "core/profiler.h"
#include "kernels/cuda/precision.h"
#include "kernels/device_dispatch.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels {
namespace {
Error not_a_compute_type(DType t) {
  return Error(str_cat("round_to: ", dtype_name(t), " is not a floating-point compute type"));
}

// One contiguous run, serially: the parallel forms below split the work.
void round_run(DType t, const float* in, float* out, int64_t n) {
  switch (t) {
    case DType::F32:
      if (in != out) std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::BF16:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_fp32(fp32_to_bf16(in[i]));
      return;
    case DType::F16:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<_Float16>(in[i]));
      return;
    default:
      throw not_a_compute_type(t);
  }
}

void encode_run(DType t, const float* in, uint16_t* out, int64_t n) {
  if (t == DType::BF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = fp32_to_bf16(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = fp32_to_fp16(in[i]);
  }
}

void check_16bit(DType t, const char* what) {
  TESSERA_CHECK(t == DType::BF16 || t == DType::F16, what, ": ", dtype_name(t), " is not a 16-bit type");
}

// Calls run(begin, end) on pieces of [0, n) in parallel.
template <typename Run>
void in_parallel(int64_t n, const Run& run) {
  constexpr int64_t kPiece = 1 << 14;
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(n))
  for (int64_t b = 0; b < n; b += kPiece) run(b, b + kPiece < n ? b + kPiece : n);
}

}  // namespace

float round_to(DType t, float x) {
  float out;
  round_run(t, &x, &out, 1);
  return out;
}

void round_to(DType t, const float* in, float* out, int64_t n) {
  TESSERA_PROFILE_SCOPE("round_to");
  if (t != DType::F32 && t != DType::BF16 && t != DType::F16) throw not_a_compute_type(t);
  in_parallel(n, [&](int64_t b, int64_t e) { round_run(t, in + b, out + b, e - b); });
}

void round_to_serial(DType t, const float* in, float* out, int64_t n) { round_run(t, in, out, n); }

void encode_16bit(DType t, const float* in, uint16_t* out, int64_t n) {
  check_16bit(t, "encode_16bit");
  in_parallel(n, [&](int64_t b, int64_t e) { encode_run(t, in + b, out + b, e - b); });
}

void round_rows(DType t, const float* in, int64_t rows, int64_t cols, int64_t ld, float* out) {
  TESSERA_PROFILE_SCOPE("round_rows_16bit");
  if (t != DType::F32 && t != DType::BF16 && t != DType::F16) throw not_a_compute_type(t);
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(rows * cols))
  for (int64_t r = 0; r < rows; ++r) round_run(t, in + r * ld, out + r * cols, cols);
}

void encode_rows(DType t, const float* in, int64_t rows, int64_t cols, int64_t ld, uint16_t* out) {
  check_16bit(t, "encode_rows");
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(rows * cols))
  for (int64_t r = 0; r < rows; ++r) encode_run(t, in + r * ld, out + r * cols, cols);
}

namespace {
bool reuse_rounded = true;
}  // namespace

bool reuse_rounded_inputs() { return reuse_rounded; }
void set_reuse_rounded_inputs(bool on) { reuse_rounded = on; }

namespace {
bool gpu_16bit_buffers = true;
}  // namespace

bool gpu_16bit_gemm_buffers() { return gpu_16bit_buffers; }
void set_gpu_16bit_gemm_buffers(bool on) { gpu_16bit_buffers = on; }

DType gemm_buffer_type(DType t, Device d) {
  return t != DType::F32 && d.type == DeviceType::CUDA && gpu_16bit_buffers ? t : DType::F32;
}

Tensor gemm_input(const Tensor& x, DType t, const char* what) {
  if (!x.defined()) return x;
  const DType want = gemm_buffer_type(t, x.device());
  if (x.dtype() == want) return x;
  TESSERA_CHECK(x.dtype() == DType::F32 || x.dtype() == t, what, ": a GEMM input of type ", dtype_name(x.dtype()),
                " multiplied as ", dtype_name(t), " (fp32, or 16-bit values of the input type)");
  return want == DType::F32 ? to_fp32(x) : store_as(want, x);
}

DType gemm_rounding(DType t) { return reuse_rounded ? t : DType::F32; }

void round_to(DType t, const Tensor& in, const Tensor& out) {
  const Device d = kernel_device("round_to", {&in, &out}, Impl::kCpuAndCuda);
  check_numel("round_to", "out", out, in.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d)) return cuda::round_to(t, in.f32(), out.f32(), in.numel());
  round_to(t, in.f32(), out.f32(), in.numel());
}

bool round_in_place_for_gemm(DType t, const Tensor& x) {
  if (t == DType::F32 || !reuse_rounded) return false;
  round_to(t, x, x);
  return true;
}

Tensor store_as(DType t, const Tensor& fp32) {
  if (t == DType::F32 || !fp32.defined()) return fp32;
  const Device d = kernel_device("store_as", {&fp32}, Impl::kCpuAndCuda);
  TESSERA_PROFILE_SCOPE("store_16bit");
  Tensor out = Tensor::empty(fp32.shape(), t, d);
  if constexpr (kWithCuda) {
    if (on_cuda(d)) {
      cuda::encode_16bit(t, fp32.f32(), static_cast<uint16_t*>(out.raw()), fp32.numel());
      return out;
    }
  }
  encode_16bit(t, fp32.f32(), static_cast<uint16_t*>(out.raw()), fp32.numel());
  return out;
}

namespace {
void widen_run(DType t, const uint16_t* in, float* out, int64_t n) {
  if (t == DType::BF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_fp32(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_fp32(in[i]);
  }
}

// The first defined tensor of `tensors`, or null: its device is the one all must share.
[[maybe_unused]] const Tensor* first_defined(const std::vector<Tensor*>& tensors) {
  for (const Tensor* t : tensors)
    if (t->defined()) return t;
  return nullptr;
}

// Calls run(k, begin, end) on pieces of every n[k] in one parallel region, without a barrier between
// tensors.
template <typename Run>
void pieces_in_parallel(const std::vector<int64_t>& n, const Run& run) {
  constexpr int64_t kPiece = 1 << 14;
  int64_t total = 0;
  for (int64_t size : n) total += size;
#pragma omp parallel if (parallel : parallel_worth(total))
  for (size_t k = 0; k < n.size(); ++k) {
#pragma omp for schedule(static) nowait
    for (int64_t b = 0; b < n[k]; b += kPiece) run(k, b, b + kPiece < n[k] ? b + kPiece : n[k]);
  }
}
}  // namespace

void store_all_as(DType t, const std::vector<Tensor*>& tensors) {
  if (t == DType::F32) return;
  check_16bit(t, "store_all_as");
  if constexpr (kWithCuda) {
    // On a GPU each tensor is one launch of store_as's kernel: there is no thread team to share.
    if (const Tensor* first = first_defined(tensors); first && on_cuda(first->device())) {
      for (Tensor* x : tensors) {
        kernel_device("store_all_as", {first, x}, Impl::kCpuAndCuda);
        if (x->defined() && x->dtype() == DType::F32) *x = store_as(t, *x);
      }
      return;
    }
  }
  for (const Tensor* x : tensors) kernel_device("store_all_as", {x});
  TESSERA_PROFILE_SCOPE("store_16bit");
  std::vector<Tensor> out(tensors.size());
  std::vector<int64_t> n(tensors.size(), 0);
  for (size_t k = 0; k < tensors.size(); ++k) {
    if (!tensors[k]->defined() || tensors[k]->dtype() != DType::F32) continue;
    out[k] = Tensor::empty(tensors[k]->shape(), t, Device::cpu());
    n[k] = tensors[k]->numel();
  }
  pieces_in_parallel(n, [&](size_t k, int64_t b, int64_t e) {
    encode_run(t, tensors[k]->f32() + b, static_cast<uint16_t*>(out[k].raw()) + b, e - b);
  });
  for (size_t k = 0; k < tensors.size(); ++k)
    if (out[k].defined()) *tensors[k] = out[k];
}

void all_to_fp32(const std::vector<Tensor*>& tensors) {
  if constexpr (kWithCuda) {
    if (const Tensor* first = first_defined(tensors); first && on_cuda(first->device())) {
      for (Tensor* x : tensors) {
        kernel_device("all_to_fp32", {first, x}, Impl::kCpuAndCuda);
        *x = to_fp32(*x);
      }
      return;
    }
  }
  for (const Tensor* x : tensors) kernel_device("all_to_fp32", {x});
  TESSERA_PROFILE_SCOPE("widen_16bit");
  std::vector<Tensor> out(tensors.size());
  std::vector<int64_t> n(tensors.size(), 0);
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& s = *tensors[k];
    if (!s.defined() || s.dtype() == DType::F32) continue;
    TESSERA_CHECK(s.dtype() == DType::BF16 || s.dtype() == DType::F16, "to_fp32: ", dtype_name(s.dtype()),
                  " is not a 16-bit floating-point type");
    out[k] = Tensor::empty(s.shape(), DType::F32, Device::cpu());
    n[k] = s.numel();
  }
  pieces_in_parallel(n, [&](size_t k, int64_t b, int64_t e) {
    widen_run(tensors[k]->dtype(), static_cast<const uint16_t*>(tensors[k]->raw()) + b, out[k].f32() + b, e - b);
  });
  for (size_t k = 0; k < tensors.size(); ++k)
    if (out[k].defined()) *tensors[k] = out[k];
}

Tensor to_fp32(const Tensor& stored) {
  if (!stored.defined() || stored.dtype() == DType::F32) return stored;
  const Device d = kernel_device("to_fp32", {&stored}, Impl::kCpuAndCuda);
  TESSERA_PROFILE_SCOPE("widen_16bit");
  TESSERA_CHECK(stored.dtype() == DType::BF16 || stored.dtype() == DType::F16, "to_fp32: ",
                dtype_name(stored.dtype()), " is not a 16-bit floating-point type");
  Tensor out = Tensor::empty(stored.shape(), DType::F32, d);
  if constexpr (kWithCuda) {
    if (on_cuda(d)) {
      cuda::widen_16bit(stored.dtype(), static_cast<const uint16_t*>(stored.raw()), out.f32(), stored.numel());
      return out;
    }
  }
  const uint16_t* in = static_cast<const uint16_t*>(stored.raw());
  float* o = out.f32();
  const int64_t n = stored.numel();
  if (stored.dtype() == DType::BF16) {
#pragma omp parallel for simd schedule(static) if (parallel : parallel_worth(n))
    for (int64_t i = 0; i < n; ++i) o[i] = bf16_to_fp32(in[i]);
  } else {
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(n))
    for (int64_t i = 0; i < n; ++i) o[i] = fp16_to_fp32(in[i]);
  }
  return out;
}

}  // namespace tessera::kernels
