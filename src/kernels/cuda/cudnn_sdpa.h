// cuDNN's fused flash attention (kernels/cuda/cudnn_sdpa_graph.h) behind kernels/cuda/attention.h's
// attention_forward / attention_backward when TESSERA_CUDA_ATTENTION=cudnn: Q, K, V (and O, dO) rounded to
// bf16 into scratch of the device's allocator, one cuDNN execution plan per shape (built on first use and
// kept: operation graph, engine heuristics, the first configuration that finalizes), its workspace from
// the allocator, then O, dQ, dK, dV widened back to fp32; lse is cuDNN's fp32 Stats, written in place.
// cuDNN is loaded at run time (kernels/cudnn_library.h) and refused by name where missing. Declared in
// every CUDA build; a toolkit without cudnn_graph.h builds a version that refuses with that reason.
#pragma once

#include <string>

#include "kernels/attention.h"

namespace tessera::kernels::cuda {

// Why cuDNN's attention cannot run this call, or "" where it can: dropout (cuDNN's Philox stream is not
// the CPU's, so its masks would differ), a document or padding mask, keys longer than the queries, a
// head_dim that is no multiple of 8 or above 256. No GPU needed.
std::string cudnn_attention_refusal(const AttentionShape& shape, const AttentionDropout& dropout);

// As attention_forward / attention_backward (kernels/cuda/attention.h) on device buffers, in bf16 with
// fp32 softmax statistics; an Error naming TESSERA_CUDA_ATTENTION=cudnn and the reason where
// cudnn_attention_refusal gives one, or where cuDNN is missing or refuses the graph. seq and batch
// positive.
void attention_forward_cudnn(const float* q, const float* k, const float* v, float* out, float* lse,
                             const AttentionShape& shape, float softmax_scale, const AttentionDropout& dropout);
void attention_backward_cudnn(const float* q, const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv, const AttentionShape& shape,
                              float softmax_scale, const AttentionDropout& dropout, int device);

}  // namespace tessera::kernels::cuda
