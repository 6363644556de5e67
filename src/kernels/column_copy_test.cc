// copy_columns and sum_columns against loops written from their definitions.
#include "kernels/column_copy.h"

#include <gtest/gtest.h>

namespace tessera::kernels {
namespace {

Tensor iota(const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(i) * 0.5f - 3.0f;
  return t;
}

TEST(ColumnCopy, CopiesStridedColumnsAndBroadcastsRows) {
  const Tensor src = iota({3, 7});  // 3 rows of width 7
  Tensor dst = Tensor::zeros({3, 2, 5});  // 6 rows of width 5: each src row to 2 rows
  copy_columns(src, {1, 2}, dst, {2, 1}, 3, 2);  // src columns 1, 3, 5 -> dst columns 2, 3, 4
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t j = 0; j < 5; ++j) {
      const float want = j < 2 ? 0.0f : src.f32()[(r / 2) * 7 + 1 + (j - 2) * 2];
      EXPECT_EQ(dst.f32()[r * 5 + j], want) << r << "," << j;
    }
  // Interleaving back: dst columns 2, 3, 4 -> a row's columns 0, 2, 4.
  Tensor back = Tensor::zeros({6, 6});
  copy_columns(dst, {2, 1}, back, {0, 2}, 3);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t j = 0; j < 6; ++j)
      EXPECT_EQ(back.f32()[r * 6 + j], j % 2 ? 0.0f : dst.f32()[r * 5 + 2 + j / 2]);
}

TEST(ColumnCopy, SumsRepeatedRowsInOrder) {
  const Tensor src = iota({4, 3, 5});  // 12 rows of width 5, 3 per dst row
  Tensor dst = Tensor::zeros({4, 4});
  sum_columns(src, {1, 1}, dst, {1, 2}, 2, 3);  // src columns 1, 2 summed -> dst columns 1, 3
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t j = 0; j < 2; ++j) {
      float want = 0;
      for (int64_t i = 0; i < 3; ++i) want += src.f32()[(r * 3 + i) * 5 + 1 + j];
      EXPECT_EQ(dst.f32()[r * 4 + 1 + 2 * j], want);
      EXPECT_EQ(dst.f32()[r * 4 + 2 * j], 0.0f);
    }
}

TEST(ColumnCopy, RefusesColumnsOutsideTheRows) {
  const Tensor src = iota({2, 4});
  Tensor dst = Tensor::zeros({2, 4});
  EXPECT_THROW(copy_columns(src, {1, 2}, dst, {0, 1}, 3), Error);  // column 5 of width 4
  EXPECT_THROW(copy_columns(src, {0, 1}, Tensor::zeros({3, 4}), {0, 1}, 2), Error);  // 3 rows from 2
  EXPECT_THROW(sum_columns(src, {0, 1}, Tensor::zeros({1, 4}), {0, 1}, 2, 3), Error);  // 3 rows from 2
}

}  // namespace
}  // namespace tessera::kernels
