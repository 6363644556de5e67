// The CUDA implementation of kernels/attention_merge.h over device pointers
// (kernels/cuda/attention_merge.cu): one thread per output row, the CPU's arithmetic
// (kernels/cpu/attention_merge.cc). Declared in every build, defined only in a CUDA one.
#pragma once

#include <cstdint>

namespace tessera::kernels::cuda {

void attention_merge_into(float* out, float* lse, const float* part_out, const float* part_lse, int64_t seq,
                          int64_t batch, int64_t heads, int64_t head_dim);

}  // namespace tessera::kernels::cuda
