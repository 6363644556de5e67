// The CPU's RowOps for the batched-GEMM attention (kernels/gemm_attention.h): the batched GEMMs on the CPU
// GEMM backend one matrix at a time (its strided batches refuse interleaved outputs, which dQ's are), the
// row softmax forward and backward as loops over rows. What CI tests the orchestration with; the CUDA
// row kernels (kernels/cuda/attention_gemm.cu) compute the same per row.
#pragma once

#include "kernels/gemm_attention.h"

namespace tessera::kernels::cpu {

// The process's CPU row ops (stateless).
gemm_attention::RowOps& gemm_attention_row_ops();

}  // namespace tessera::kernels::cpu
