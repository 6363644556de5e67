#include "kernels/cpu/token_layout.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera::kernels {
namespace {

// The CPU implementations over host buffers (kernels/cpu/), beside the tensor entry points.
using namespace cpu;

TEST(TokenLayout, TransposeRowsMovesSampleMajorToSequenceMajor) {
  const int64_t b = 3, s = 5;
  std::vector<int32_t> src(b * s), dst(b * s, -1);
  for (int64_t i = 0; i < b * s; ++i) src[i] = static_cast<int32_t>(100 + i);
  transpose_rows(src.data(), dst.data(), b, s, sizeof(int32_t));
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j < s; ++j) EXPECT_EQ(dst[j * b + i], src[i * s + j]) << i << "," << j;
}

TEST(TokenLayout, DefaultPositionsCountEachSampleFromZero) {
  std::vector<int32_t> p(4 * 3, -1);
  fill_positions(p.data(), 4, 3);
  for (int64_t t = 0; t < 12; ++t) EXPECT_EQ(p[t], t / 3);
}

TEST(TokenLayout, SplitQkvFollowsMegatronsGroupedLayoutAndMergeInvertsIt) {
  const int64_t rows = 2, groups = 2, per_group = 3, d = 4, width = groups * (per_group + 2) * d;
  std::vector<float> qkv(rows * width);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(i);
  std::vector<float> q(rows * groups * per_group * d), k(rows * groups * d), v(rows * groups * d);
  split_qkv(qkv.data(), q.data(), k.data(), v.data(), rows, groups, per_group, d);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t g = 0; g < groups; ++g) {
      const float* group = qkv.data() + t * width + g * (per_group + 2) * d;
      for (int64_t h = 0; h < per_group; ++h)
        for (int64_t j = 0; j < d; ++j) EXPECT_EQ(q[((t * groups + g) * per_group + h) * d + j], group[h * d + j]);
      for (int64_t j = 0; j < d; ++j) {
        EXPECT_EQ(k[(t * groups + g) * d + j], group[per_group * d + j]);
        EXPECT_EQ(v[(t * groups + g) * d + j], group[(per_group + 1) * d + j]);
      }
    }
  std::vector<float> back(qkv.size(), -1.0f);
  merge_qkv(q.data(), k.data(), v.data(), back.data(), rows, groups, per_group, d);
  EXPECT_EQ(back, qkv);
}

TEST(TokenLayout, FirstIdOutsideFindsTheFirstOffender) {
  std::vector<int32_t> ids{0, 3, 9, -1, 10};
  EXPECT_EQ(first_id_outside(ids.data(), 3, 0, 10), -1);
  EXPECT_EQ(first_id_outside(ids.data(), 5, 0, 10), 3);
  EXPECT_EQ(first_id_outside(ids.data(), 5, 0, 9), 2);
  EXPECT_EQ(first_id_outside(ids.data(), 0, 0, 1), -1);
}

}  // namespace
}  // namespace tessera::kernels
