// Step 2 of kernels/math/column_sums.h's order on the CPU: the chunks' partial column sums added up.
#pragma once

#include <cstdint>

namespace tessera::kernels::cpu {

// out[c] += (float) (sum over k in order of partial[k * cols + c], in double); parallel over columns.
void sum_column_partials(const float* partial, int64_t chunks, int64_t cols, float* out);

}  // namespace tessera::kernels::cpu
