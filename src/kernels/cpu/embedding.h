// The CPU implementation of kernels/embedding.h, over host buffers: what the tensor-level entry points call
// once the tensors' device is checked, and what the kernel tests exercise directly.
// Token embedding plus optional learned absolute position embedding.
#pragma once

#include <cstdint>

namespace tessera::kernels::cpu {

// out[t, :] = wte[tokens[t] - vocab_begin, :] (zero when tokens[t] is outside [vocab_begin, vocab_end),
// which is how a vocab-parallel shard sees ids owned by other ranks) + wpe[positions[t], :] when wpe
// is not null. wte is [vocab_end - vocab_begin, hidden]. out is overwritten.
void embedding_forward(const int32_t* tokens, const int32_t* positions, const float* wte, const float* wpe,
                       float* out, int64_t rows, int64_t hidden, int64_t vocab_begin, int64_t vocab_end);
// Accumulates into dwte (rows of ids in range) and dwpe (if not null). Deterministic: the result does
// not depend on the thread count.
void embedding_backward(const int32_t* tokens, const int32_t* positions, const float* dout, float* dwte,
                        float* dwpe, int64_t rows, int64_t hidden, int64_t vocab_begin, int64_t vocab_end);

}  // namespace tessera::kernels::cpu
