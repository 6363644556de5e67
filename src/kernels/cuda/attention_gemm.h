// The batched-GEMM attention (kernels/gemm_attention.h) on CUDA: QK^T, PV and backward's four products as
// cuBLASLt strided-batched GEMMs (kernels/cuda/gemm_cublaslt.h; bf16 tensor-core products with fp32
// accumulation, or fp32 ones), the masked softmax forward and backward as row kernels, one warp per score
// row (kernels/cuda/attention_gemm.cu). kernels/cuda/attention.h's attention_forward/backward run it when
// TESSERA_CUDA_ATTENTION is gemm or gemm_bf16 (not the default until a device check has passed).
// Declared in every build, defined only in a CUDA one.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/attention.h"
#include "kernels/gemm_attention.h"

namespace tessera::kernels::cuda {

// The row ops of CUDA device `device` (registers the cuBLASLt GEMM backend on first use).
gemm_attention::RowOps& gemm_attention_row_ops(int device);

// As attention_forward / attention_backward (kernels/cuda/attention.h) on device buffers whose masks the
// caller has checked, with the GEMMs' inputs rounded to `gemm_input` (F32: none). seq and batch positive.
void attention_forward_gemm(const float* q, const float* k, const float* v, float* out, float* lse,
                            const AttentionShape& shape, float softmax_scale, const AttentionDropout& dropout,
                            DType gemm_input);
void attention_backward_gemm(const float* q, const float* k, const float* v, const float* lse, const float* dout,
                             float* dq, float* dk, float* dv, const AttentionShape& shape, float softmax_scale,
                             const AttentionDropout& dropout, DType gemm_input, int device);

}  // namespace tessera::kernels::cuda
