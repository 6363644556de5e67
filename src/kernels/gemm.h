// One GEMM interface for every device. The CPU backend is oneDNN matmul; a cuBLAS(Lt) backend
// implements the same class later. All matrices are row-major with explicit leading dimensions, fp32
// in memory on the CPU (a_type, b_type, c_type say so, for backends that take 16-bit storage).
// Mixed precision (--bf16, --fp16) sets GemmArgs::input_type: the inputs are multiplied as 16-bit
// values and accumulated in fp32, as a 16-bit GEMM on a GPU does. An epilogue (bias, GELU) and strided
// batching are what cuBLASLt offers too, so the model can ask for them without knowing the device.
#pragma once

#include <cstdint>

#include "core/stream.h"
#include "core/tensor.h"

namespace tessera::kernels {

enum class Trans : uint8_t { N, T };

// What is applied to each element x = alpha op(A) op(B) + beta C before it is stored:
//   None: x;  Bias: x + bias[j];  BiasGeluTanh: gelu(x + bias[j]);  GeluTanh: gelu(x),
// with gelu the tanh form of kernels/math/activations.h (bitwise kernels::gelu_forward's).
enum class GemmEpilogue : uint8_t { None, Bias, BiasGeluTanh, GeluTanh };
const char* gemm_epilogue_name(GemmEpilogue e);  // "none", "bias", "bias+gelu_tanh", "gelu_tanh"

struct GemmArgs {
  Trans trans_a = Trans::N, trans_b = Trans::N;
  int64_t m = 0, n = 0, k = 0;      // C is m x n, op(A) is m x k, op(B) is k x n
  const float* a = nullptr;
  int64_t lda = 0;                  // row stride of A as stored
  const float* b = nullptr;
  int64_t ldb = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  float alpha = 1.0f, beta = 0.0f;  // C = alpha * op(A) op(B) + beta * C, then the epilogue
  // Length-n row vector added to every row of C, after alpha and beta (column j gets bias[j]): needed by
  // the Bias and BiasGeluTanh epilogues. A bias with epilogue None is the Bias epilogue (how callers
  // asked for one before epilogues existed).
  const float* bias = nullptr;
  // F32, or BF16/F16: op(A) and op(B) are rounded to that type before they are multiplied (fp32
  // accumulation; C, alpha, beta and the bias stay fp32).
  DType input_type = DType::F32;
  // With input_type F32: the backend may multiply the fp32 inputs as TF32 (10-bit mantissa, fp32
  // accumulation), as a GPU's tensor cores do (cuBLASLt's CUBLAS_COMPUTE_32F_FAST_TF32, PyTorch's
  // allow_tf32). The CPU backend has no TF32 kernel and multiplies in fp32: within TF32's rounding of
  // the GPU's result.
  bool tf32 = false;
  // The caller's promise that A (B) already holds values of input_type, each an fp32 number that a
  // 16-bit one can hold (a weight rounded once per step, an activation its producer wrote rounded, one
  // widened from 16-bit storage). Such an input is not rounded again: rounding is idempotent, so the
  // product is bitwise the one of rounding it here.
  bool a_rounded = false, b_rounded = false;

  // Element types of the buffers a, b, c as stored. The CPU backend takes fp32 buffers (F32, the
  // default, with input_type rounding them as above) and rejects anything else with an Error.
  DType a_type = DType::F32, b_type = DType::F32, c_type = DType::F32;
  GemmEpilogue epilogue = GemmEpilogue::None;
  // Strided batching, as cuBLASLt's strided batched GEMM: matrix i of A is at a + i * stride_a (in
  // elements), likewise B and C. A stride of 0 for A or B shares one matrix across the batch; C's
  // matrices must not overlap. Matrix i adds the bias at bias + i * stride_bias (cuBLASLt's bias batch
  // stride): 0 shares one bias across the batch, another stride gives each matrix its own (the local
  // experts of a grouped GEMM, model/grouped_mlp.h).
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0, stride_bias = 0;
  // The stream the GEMM is ordered on; its device chooses the backend (kernels::gemm below). The CPU
  // runs it on the calling thread, so the handle itself is ignored there.
  Stream stream = Stream::default_for(Device::cpu());

  GemmEpilogue effective_epilogue() const {
    return epilogue == GemmEpilogue::None && bias != nullptr ? GemmEpilogue::Bias : epilogue;
  }
};

class GemmBackend {
 public:
  virtual ~GemmBackend() = default;
  virtual void gemm(const GemmArgs& args) = 0;
  // The backend for a device (oneDNN on CPU; another device's is the one registered for its type, an
  // Error naming the device where none is).
  static GemmBackend& for_device(Device device);
  // Makes `backend` the one of every device of `type` (not the CPU) and returns the previous one; a
  // device backend calls it when it starts (kernels/cuda/gemm_cublaslt.h).
  static GemmBackend* register_backend(DeviceType type, GemmBackend* backend);
  // Whether 16-bit inputs of type t run on a 16-bit kernel of this device (oneDNN: AVX512-BF16, AMX,
  // AVX512-FP16). Where not, they are rounded into fp32 copies and run on the fp32 kernel: the same
  // arithmetic, at fp32 speed.
  virtual bool native_16bit(DType t) = 0;
};

// The GEMM on the backend of its stream's device (the CPU unless the caller names another).
inline void gemm(const GemmArgs& args) { GemmBackend::for_device(args.stream.device).gemm(args); }

}  // namespace tessera::kernels
