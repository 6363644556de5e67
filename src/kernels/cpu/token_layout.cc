#include "kernels/cpu/token_layout.h"
#include "kernels/parallel_grain.h"

#include <cstring>

namespace tessera::kernels::cpu {

void transpose_rows(const void* src, void* dst, int64_t rows, int64_t cols, size_t elem_bytes) {
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) std::memcpy(d + (j * rows + i) * elem_bytes, s + (i * cols + j) * elem_bytes, elem_bytes);
}

void fill_positions(int32_t* positions, int64_t seq, int64_t batch, int64_t first) {
  for (int64_t t = 0; t < seq * batch; ++t) positions[t] = static_cast<int32_t>(first + t / batch);
}

void split_qkv(const float* qkv, float* q, float* k, float* v, int64_t rows, int64_t groups, int64_t per_group,
               int64_t d) {
  const int64_t row_width = groups * (per_group + 2) * d;
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(rows * row_width))
  for (int64_t t = 0; t < rows; ++t) {
    const float* src = qkv + t * row_width;
    for (int64_t g = 0; g < groups; ++g) {
      const float* group = src + g * (per_group + 2) * d;
      for (int64_t j = 0; j < per_group * d; ++j) q[(t * groups * per_group + g * per_group) * d + j] = group[j];
      for (int64_t j = 0; j < d; ++j) k[(t * groups + g) * d + j] = group[per_group * d + j];
      for (int64_t j = 0; j < d; ++j) v[(t * groups + g) * d + j] = group[(per_group + 1) * d + j];
    }
  }
}

void merge_qkv(const float* q, const float* k, const float* v, float* qkv, int64_t rows, int64_t groups,
               int64_t per_group, int64_t d) {
  const int64_t row_width = groups * (per_group + 2) * d;
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(rows * row_width))
  for (int64_t t = 0; t < rows; ++t) {
    float* dst = qkv + t * row_width;
    for (int64_t g = 0; g < groups; ++g) {
      float* group = dst + g * (per_group + 2) * d;
      for (int64_t j = 0; j < per_group * d; ++j) group[j] = q[(t * groups * per_group + g * per_group) * d + j];
      for (int64_t j = 0; j < d; ++j) group[per_group * d + j] = k[(t * groups + g) * d + j];
      for (int64_t j = 0; j < d; ++j) group[(per_group + 1) * d + j] = v[(t * groups + g) * d + j];
    }
  }
}

int64_t first_id_outside(const int32_t* ids, int64_t n, int64_t lo, int64_t hi) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < lo || ids[i] >= hi) return i;
  return -1;
}

}  // namespace tessera::kernels::cpu
