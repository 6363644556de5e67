// The CUDA implementation of kernels/cross_entropy.h over device pointers (kernels/cuda/cross_entropy.cu):
// the shard statistics one block per row (the max as the CPU takes it, the sum of exponentials in
// double), the backward one element per thread, the per-element math of kernels/math/softmax.h.
// Declared in every build, defined only in a CUDA one.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::kernels::cuda {

void cross_entropy_shard_stats(const float* logits, const int32_t* targets, float* max_out, float* sumexp_out,
                               float* target_logit_out, int64_t rows, int64_t vocab_local, int64_t vocab_begin);
void cross_entropy_backward(float* logits, const int32_t* targets, const float* lse, const float* dloss,
                            int64_t rows, int64_t vocab_local, int64_t vocab_begin, DType round_output);
// The fused training pass (kernels/cross_entropy.h's cross_entropy_fused), one block per row: the
// statistics as above, then the row's gradient written in place by the same block. T: float or uint16_t
// (bf16 storage, read as fp32).
template <typename T>
void cross_entropy_fused(T* logits, const int32_t* targets, const float* dloss, float* max_out, float* sumexp_out,
                         float* target_logit_out, float* lse_out, int64_t rows, int64_t vocab, DType round_output);

}  // namespace tessera::kernels::cuda
