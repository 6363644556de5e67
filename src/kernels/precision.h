// Mixed precision on fp32 storage: rounding fp32 values to what a bf16 or fp16 number can hold.
//
// Under --bf16/--fp16 a GEMM multiplies 16-bit inputs and accumulates in fp32. Tessera keeps tensors
// in fp32 and rounds each GEMM's inputs (and attention's q, k, v) to the 16-bit type as they are read:
// a product of two 16-bit values is exact in fp32, so this is the arithmetic of a 16-bit GEMM with fp32
// accumulation, whichever instructions carry it out.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace tessera::kernels {

// Largest finite fp16 value; anything that rounds beyond it becomes infinity.
inline constexpr float kFp16Max = 65504.0f;

// Round-to-nearest-even fp32 <-> fp16 (IEEE binary16: overflow to infinity, subnormals kept), through
// GCC's _Float16 (the F16C instructions with -march=native).
inline uint16_t fp32_to_fp16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
inline float fp16_to_fp32(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

// `x` rounded to the nearest value of type t (F32: x itself; BF16 or F16 otherwise).
float round_to(DType t, float x);
// out[i] = round_to(t, in[i]); in may equal out.
void round_to(DType t, const float* in, float* out, int64_t n);
// The same on fp32 tensors of the same number of elements (out may be in), dispatched on their device
// (kernels/device_dispatch.h): what the model calls.
void round_to(DType t, const Tensor& in, const Tensor& out);
// The same on the calling thread only: for kernels that round what they produce while it is in cache.
void round_to_serial(DType t, const float* in, float* out, int64_t n);
// The 16-bit encodings of in[0..n) (t is BF16 or F16).
void encode_16bit(DType t, const float* in, uint16_t* out, int64_t n);
// The same for the rows x cols matrix at `in` with row stride ld, into dense rows of `out` (row stride
// cols): how a GEMM packs its inputs.
void round_rows(DType t, const float* in, int64_t rows, int64_t cols, int64_t ld, float* out);
void encode_rows(DType t, const float* in, int64_t rows, int64_t cols, int64_t ld, uint16_t* out);

// Whether mixed precision reuses rounded GEMM inputs (the default): weights are rounded once per step
// (model::ParameterSet::cache_rounded_weights), producers whose output only feeds GEMMs write it
// rounded, and a GEMM does not round an input marked as rounded (GemmArgs::a_rounded). Off, every GEMM
// rounds both of its inputs itself, as before these were reused. Rounding is idempotent, so both give
// bitwise the same numbers: tests switch it off to check that.
bool reuse_rounded_inputs();
void set_reuse_rounded_inputs(bool on);

// The type a producer whose output feeds only GEMMs of input type t rounds it to: t when inputs are
// reused (above), else F32 (no rounding).
DType gemm_rounding(DType t);
// x rounded in place to type t when inputs are reused (above) and t is 16-bit; returns whether it was.
bool round_in_place_for_gemm(DType t, const Tensor& x);

// Whether a GPU multiplies 16-bit GEMM inputs from 16-bit buffers (the default): under --bf16/--fp16
// the weights' once-per-step copies are kept as bf16/fp16 (2 bytes, model::ParameterSet's rounded-
// weight cache) and each fp32 activation entering a GEMM is encoded into a 16-bit buffer, so that
// cuBLASLt runs its 16-bit tensor-core kernels (fp32 accumulation, fp32 output). Off, the GPU keeps the
// step-1 path: fp32 buffers that cuBLASLt rounds itself (and may run as TF32). The inputs' values are
// the same either way; tests and the device benchmark switch it off to compare. The CPU (oneDNN on fp32
// buffers) is not affected.
bool gpu_16bit_gemm_buffers();
void set_gpu_16bit_gemm_buffers(bool on);
// The element type a GEMM of input type t reads its inputs in on device d: t for a 16-bit t on a GPU
// (with the above on), else F32.
DType gemm_buffer_type(DType t, Device d);
// x (fp32, or 16-bit values of type t) as a GEMM of input type t on x's device reads it: x itself when
// it is of gemm_buffer_type(t, device) already, else its 16-bit encoding (fp32 -> t, rounding to
// nearest even as round_to) or its fp32 widening (a new tensor). A caller that feeds one tensor to
// several GEMMs converts it once with this. Any other type is an Error naming `what` and the types.
Tensor gemm_input(const Tensor& x, DType t, const char* what);

// An fp32 tensor stored as type t (BF16 or F16: half the bytes; F32: the tensor itself), and back.
// Under mixed precision the activations kept for backward are stored so, as Megatron keeps them.
Tensor store_as(DType t, const Tensor& fp32);
Tensor to_fp32(const Tensor& stored);
// store_as (to_fp32) of each tensor in place, all in one parallel pass: a layer's record holds many.
void store_all_as(DType t, const std::vector<Tensor*>& tensors);
void all_to_fp32(const std::vector<Tensor*>& tensors);

}  // namespace tessera::kernels
