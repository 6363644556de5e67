#include "kernels/precision.h"

#include "core/check.h"

namespace tessera::kernels {
namespace {
Error not_a_compute_type(DType t) {
  return Error(str_cat("round_to: ", dtype_name(t), " is not a floating-point compute type"));
}
}  // namespace

float round_to(DType t, float x) {
  switch (t) {
    case DType::F32:
      return x;
    case DType::BF16:
      return bf16_to_fp32(fp32_to_bf16(x));
    case DType::F16:
      return static_cast<float>(static_cast<_Float16>(x));
    default:
      throw not_a_compute_type(t);
  }
}

void round_to(DType t, const float* in, float* out, int64_t n) {
  switch (t) {
    case DType::F32:
      if (in != out) std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::BF16:
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_fp32(fp32_to_bf16(in[i]));
      return;
    case DType::F16:
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<_Float16>(in[i]));
      return;
    default:
      throw not_a_compute_type(t);
  }
}

void encode_16bit(DType t, const float* in, uint16_t* out, int64_t n) {
  TESSERA_CHECK(t == DType::BF16 || t == DType::F16, "encode_16bit: ", dtype_name(t), " is not a 16-bit type");
  if (t == DType::BF16) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = fp32_to_bf16(in[i]);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) out[i] = fp32_to_fp16(in[i]);
  }
}

}  // namespace tessera::kernels
