// The CUDA implementation of kernels/embedding.h over device pointers (kernels/cuda/embedding.cu): the
// lookup one element per thread, the backward one thread per column walking the rows in order, as the
// CPU's threads do, so dwte and dwpe receive their additions in the CPU's order: the same bits.
// Declared in every build, defined only in a CUDA one.
#pragma once

#include <cstdint>

namespace tessera::kernels::cuda {

void embedding_forward(const int32_t* tokens, const int32_t* positions, const float* wte, const float* wpe,
                       float* out, int64_t rows, int64_t hidden, int64_t vocab_begin, int64_t vocab_end);
void embedding_backward(const int32_t* tokens, const int32_t* positions, const float* dout, float* dwte,
                        float* dwpe, int64_t rows, int64_t hidden, int64_t vocab_begin, int64_t vocab_end);

}  // namespace tessera::kernels::cuda
