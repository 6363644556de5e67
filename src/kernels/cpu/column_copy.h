// The CPU implementation of kernels/column_copy.h over host buffers (widths are the tensors' last
// dimensions, rows dst's).
#pragma once

#include <cstdint>

namespace tessera::kernels::cpu {

void copy_columns(const float* src, int64_t src_width, int64_t src_first, int64_t src_step, float* dst,
                  int64_t dst_rows, int64_t dst_width, int64_t dst_first, int64_t dst_step, int64_t count,
                  int64_t repeat);
void sum_columns(const float* src, int64_t src_width, int64_t src_first, int64_t src_step, float* dst,
                 int64_t dst_rows, int64_t dst_width, int64_t dst_first, int64_t dst_step, int64_t count,
                 int64_t repeat);

}  // namespace tessera::kernels::cpu
