#include "kernels/cpu/column_copy.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {

void copy_columns(const float* src, int64_t src_width, int64_t src_first, int64_t src_step, float* dst,
                  int64_t dst_rows, int64_t dst_width, int64_t dst_first, int64_t dst_step, int64_t count,
                  int64_t repeat) {
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(dst_rows * count * repeat))
  for (int64_t r = 0; r < dst_rows; ++r) {
    const float* s = src + (r / repeat) * src_width + src_first;
    float* d = dst + r * dst_width + dst_first;
    for (int64_t j = 0; j < count; ++j) d[j * dst_step] = s[j * src_step];
  }
}

void sum_columns(const float* src, int64_t src_width, int64_t src_first, int64_t src_step, float* dst,
                 int64_t dst_rows, int64_t dst_width, int64_t dst_first, int64_t dst_step, int64_t count,
                 int64_t repeat) {
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(dst_rows * count * repeat))
  for (int64_t r = 0; r < dst_rows; ++r) {
    float* d = dst + r * dst_width + dst_first;
    for (int64_t j = 0; j < count; ++j) {
      float sum = 0;
      for (int64_t i = 0; i < repeat; ++i) sum += src[(r * repeat + i) * src_width + src_first + j * src_step];
      d[j * dst_step] = sum;
    }
  }
}

}  // namespace tessera::kernels::cpu
