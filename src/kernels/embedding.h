// Token embedding plus optional learned absolute position embedding, on tensors, vocabulary-shard
// aware. Dispatched on the tensors' device (kernels/device_dispatch.h; the CPU code is
// kernels/cpu/embedding.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tessera::kernels {

// out[t, :] = wte[tokens[t] - vocab_begin, :] (zero when tokens[t] is outside [vocab_begin, vocab_end),
// which is how a vocab-parallel shard sees ids owned by other ranks) + wpe[positions[t], :] when wpe
// is defined. tokens, positions int32 [rows] (positions may be undefined without wpe); wte
// [vocab_end - vocab_begin, hidden]; out [rows, hidden] is overwritten.
void embedding_forward(const Tensor& tokens, const Tensor& positions, const Tensor& wte, const Tensor& wpe,
                       const Tensor& out, int64_t vocab_begin, int64_t vocab_end);
// Accumulates dout's rows into dwte (rows of ids in range) and dwpe (if defined). Deterministic: the
// result does not depend on the thread count.
void embedding_backward(const Tensor& tokens, const Tensor& positions, const Tensor& dout, const Tensor& dwte,
                        const Tensor& dwpe, int64_t vocab_begin, int64_t vocab_end);

}  // namespace tessera::kernels
