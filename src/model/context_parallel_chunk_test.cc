// The load-balanced split of a micro-batch over the context-parallel group: rank i of cp gets global
// chunks i and 2 cp - 1 - i of every [batch, seq] tensor, with their global positions and document
// starts.
#include "model/context_parallel_chunk.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera::model {
namespace {

Tensor ids(int64_t samples, int64_t seq, int32_t base) {
  Tensor t = Tensor::empty({samples, seq}, DType::I32);
  for (int64_t b = 0; b < samples; ++b)
    for (int64_t s = 0; s < seq; ++s) t.i32()[b * seq + s] = static_cast<int32_t>(base + 100 * b + s);
  return t;
}

std::vector<int32_t> values(const Tensor& t) { return std::vector<int32_t>(t.i32(), t.i32() + t.numel()); }

TEST(ContextParallelSplit, RankHoldsChunksIAndTwoCpMinusOneMinusIWithGlobalPositions) {
  MicroBatch batch;
  batch.tokens = ids(2, 8, 0);
  batch.labels = ids(2, 8, 1);
  batch.loss_mask = Tensor::zeros({2, 8});
  batch.sample_offset = 6;
  // cp 2: chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  const MicroBatch r0 = context_parallel_part(batch, 2, 0), r1 = context_parallel_part(batch, 2, 1);
  EXPECT_EQ(values(r0.tokens), (std::vector<int32_t>{0, 1, 6, 7, 100, 101, 106, 107}));
  EXPECT_EQ(values(r1.tokens), (std::vector<int32_t>{2, 3, 4, 5, 102, 103, 104, 105}));
  EXPECT_EQ(values(r0.labels), (std::vector<int32_t>{1, 2, 7, 8, 101, 102, 107, 108}));
  EXPECT_EQ(values(r0.positions), (std::vector<int32_t>{0, 1, 6, 7, 0, 1, 6, 7}));
  EXPECT_EQ(values(r1.positions), (std::vector<int32_t>{2, 3, 4, 5, 2, 3, 4, 5}));
  EXPECT_EQ(r1.loss_mask.numel(), 8);
  EXPECT_EQ(r1.sample_offset, 6);
  for (int64_t local = 0; local < 4; ++local)
    EXPECT_EQ(parallel::context_parallel_global_position(local, 8, 2, 1), values(r1.positions)[local]);

  // Positions the data gave (--reset-position-ids) are cut like the tokens.
  batch.positions = ids(2, 8, 1000);
  EXPECT_EQ(values(context_parallel_part(batch, 4, 3).positions),
            (std::vector<int32_t>{1003, 1004, 1100 + 3, 1100 + 4}));

  // Document starts (--reset-attention-mask) are cut alike, their values staying global positions.
  batch.doc_start = ids(2, 8, 2000);
  EXPECT_EQ(values(context_parallel_part(batch, 2, 1).doc_start),
            (std::vector<int32_t>{2002, 2003, 2004, 2005, 2102, 2103, 2104, 2105}));
  batch.padding_mask = Tensor::zeros({2, 8}, DType::I32);
  EXPECT_THROW(context_parallel_part(batch, 2, 0), Error);  // causal attention only
  batch.padding_mask = Tensor();
  EXPECT_THROW(context_parallel_part(batch, 3, 0), Error);  // 8 positions are not 6 chunks
}

}  // namespace
}  // namespace tessera::model
