// The CUDA implementation of kernels/column_copy.h over device pointers (kernels/cuda/column_copy.cu):
// one thread per written element. A copy moves bits; a sum adds its `repeat` terms in float, in order of
// i, as the CPU loop does (kernels/cpu/column_copy.cc), so both give the same bits. Declared in every
// build, defined only in a CUDA one. Widths are the tensors' last dimensions, rows dst's.
#pragma once

#include <cstdint>

namespace tessera::kernels::cuda {

void copy_columns(const float* src, int64_t src_width, int64_t src_first, int64_t src_step, float* dst,
                  int64_t dst_rows, int64_t dst_width, int64_t dst_first, int64_t dst_step, int64_t count,
                  int64_t repeat);
void sum_columns(const float* src, int64_t src_width, int64_t src_first, int64_t src_step, float* dst,
                 int64_t dst_rows, int64_t dst_width, int64_t dst_first, int64_t dst_step, int64_t count,
                 int64_t repeat);

}  // namespace tessera::kernels::cuda
