// Linear layer y = x W^T + b on tensors (weights stored [out, in] as in Megatron and PyTorch), on top
// of the GEMM interface; rows of x are tokens. What the model's linear layers and output layer call,
// dispatched on the tensors' device (kernels/device_dispatch.h; the CPU code is kernels/cpu/linear.h,
// the CUDA code kernels/cuda/linear.h: cuBLASLt's GEMMs).
#pragma once

#include "core/tensor.h"

namespace tessera::kernels {

// x [rows, in] (any shape of rows * in elements), w [out, in], b [out] or undefined -> y [rows, out]
// (overwritten). input_type: the GEMM inputs' precision (GemmArgs::input_type); the bias is added in
// fp32. x_rounded, w_rounded: x (w) already holds values of input_type (GemmArgs::a_rounded). x and w
// are fp32 or 16-bit tensors of input_type (a weight's bf16 copy, model::ParameterSet::rounded_value).
// On a GPU under a 16-bit input_type the GEMMs read 16-bit buffers (kernels::gpu_16bit_gemm_buffers):
// an fp32 input is encoded into one for the call, once, and freed after it.
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                    DType input_type = DType::F32, bool x_rounded = false, bool w_rounded = false);

// dy [rows, out]. dx [rows, in] is overwritten; dw [out, in] and db [out] are accumulated into
// (gradient accumulation over micro-batches). Any of dx, dw, db may be undefined (not wanted).
// dy_rounded: dy already holds values of input_type, so it is not rounded again for the GEMMs. dy is
// fp32 (the bias gradient sums it unrounded); on a GPU it is encoded once for both products.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx, const Tensor& dw,
                     const Tensor& db, DType input_type = DType::F32, bool x_rounded = false,
                     bool w_rounded = false, bool dy_rounded = false);

}  // namespace tessera::kernels
