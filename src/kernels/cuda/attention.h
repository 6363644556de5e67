// The CUDA implementation of kernels/attention.h over device pointers (kernels/cuda/attention.cu): the
// CPU's semantics option for option (kernels/cpu/attention.h), the dropout masks bit for bit (the same
// Philox elements and keep test). One warp per query row (forward, dq) or per key row (dk, dv), lanes
// over keys (or queries) in tiles of 32, so no seq x seq matrix and no float atomics: backward is
// deterministic. Correct first; a faster kernel is a later step. Declared in every build, defined only
// in a CUDA one.
#pragma once

#include <cstdint>

#include "kernels/attention.h"  // AttentionShape, AttentionDropout

namespace tessera::kernels::cuda {

// As kernels::cpu's, on device buffers: shape.doc_start and shape.key_valid (the mask, int32
// [batch, seq], or null) point to device memory too. The mask is copied to the host once per call, to be
// checked as the CPU checks it. `device` is the buffers' CUDA device (backward's scratch comes from its
// allocator).
void attention_forward(const float* q, const float* k, const float* v, float* out, float* lse,
                       const AttentionShape& shape, float softmax_scale, const AttentionDropout& dropout);
// dq, dk, dv are overwritten. Deterministic: the same inputs give the same bits.
void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv, const AttentionShape& shape,
                        float softmax_scale, const AttentionDropout& dropout, int device);
// Which kernels attention_forward and attention_backward run. The tiled ones (8 rows a block sharing each
// 32-row tile of K and V, or Q and dO, in shared memory) are the default: on an H200 they passed the same
// tests as the row-per-warp ones (one warp per row, K and V read straight from global memory), memcheck
// and racecheck, and made a GPT-2 124M bf16 step 2.85x faster (BENCHMARKS.md). The row-per-warp ones stay
// as the simple reference (TESSERA_CUDA_ATTENTION=rows) and for wide heads whose tiles exceed 48 KiB of
// shared memory, which always take them. The batched-GEMM ones (kernels/cuda/attention_gemm.h: cuBLASLt
// strided-batched GEMMs and row softmax kernels; gemm with fp32 products, gemm_bf16 with bf16 tensor-core
// products) are opt-in until a device check has run them; empty problems take the tiled ones. cuDNN's
// fused flash attention (kernels/cuda/cudnn_sdpa.h: bf16 inputs, fp32 softmax statistics, cuDNN loaded at
// run time) is opt-in too, and refuses by name what it cannot express (dropout, document and padding
// masks, keys before the queries).
enum class AttentionKernels { kRowPerWarp, kTiled, kBatchedGemm, kBatchedGemmBf16, kCudnn };
// TESSERA_CUDA_ATTENTION (rows, tiled, gemm, gemm_bf16 or cudnn; unset: tiled, anything else an Error
// naming it) until set_...
AttentionKernels attention_kernels();
void set_attention_kernels(AttentionKernels kernels);
// kernels::block_doc_start on device buffers: doc [batch, n], out [batch, width].
void block_doc_start(const int32_t* doc, int64_t batch, int64_t n, int64_t column, int64_t width, int64_t first_key,
                     int32_t* out);

}  // namespace tessera::kernels::cuda
