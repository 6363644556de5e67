#include "train/batching.h"

#include <gtest/gtest.h>

namespace tessera::train {
namespace {

// A one-sample dataset: 9 tokens with end-of-document (id 0) at positions 2 and 5.
class FixedDataset final : public data::TokenDataset {
 public:
  int64_t size() const override { return 1; }
  int64_t seq_length() const override { return 8; }
  void get(int64_t, std::span<int32_t> out) const override {
    const int32_t tokens[9] = {5, 6, 0, 7, 8, 0, 9, 4, 3};
    std::copy(tokens, tokens + 9, out.begin());
  }
};

TEST(Batching, MegatronMasksAndPositionIds) {
  FixedDataset data;
  model::MicroBatch mb = make_micro_batch(data, 0, 1, {0, true, true, true});
  std::vector<int32_t> labels(mb.labels.i32(), mb.labels.i32() + 8);
  EXPECT_EQ(labels, (std::vector<int32_t>{6, 0, 7, 8, 0, 9, 4, 3}));
  std::vector<float> mask(mb.loss_mask.f32(), mb.loss_mask.f32() + 8);
  EXPECT_EQ(mask, (std::vector<float>{1, 1, 0, 1, 1, 0, 1, 1}));  // inputs that are end-of-document
  std::vector<int32_t> positions(mb.positions.i32(), mb.positions.i32() + 8);
  EXPECT_EQ(positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1}));
  std::vector<int32_t> doc_start(mb.doc_start.i32(), mb.doc_start.i32() + 8);
  EXPECT_EQ(doc_start, (std::vector<int32_t>{0, 0, 0, 3, 3, 3, 6, 6}));

  model::MicroBatch plain = make_micro_batch(data, 0, 1, {0, false, false, false});
  EXPECT_FALSE(plain.positions.defined());
  EXPECT_FALSE(plain.doc_start.defined());
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(plain.loss_mask.f32()[i], 1.0f);
}

}  // namespace
}  // namespace tessera::train
