// Megatron's roll_tensor under context parallelism: each rank's roll of its two load-balanced chunks
// (parallel/context_parallel.h) equals those chunks of the whole sequence rolled left k times (value at
// position s + k, 0 past the end), for int32 and fp32 values, chunks of one and of several positions, at
// cp = the world size (cp 1: the plain roll).
#include <gtest/gtest.h>

#include "comm/mpi_test_main.h"
#include "model/sequence_roll.h"

namespace tessera::model {
namespace {

// The value of sample b at position s of the whole sequence: distinct for every (s, b), never 0.
int32_t value_at(int64_t s, int64_t b) { return static_cast<int32_t>(100 * s + b + 1); }

TEST(SequenceRoll, EachRanksRollIsItsChunksOfTheWholeSequencesRoll) {
  auto world = comm::make_mpi_world_group();
  const int cp = world->size(), rank = world->rank();
  const parallel::ContextParallelContext context{world.get()};
  constexpr int64_t kBatch = 3;
  for (int64_t chunk : {1, 2, 3}) {
    const int64_t seq = 2 * cp * chunk;
    const auto chunks = parallel::load_balanced_chunks(cp, rank);
    // This rank's [2 chunk, batch] part, in the [seq, batch] layout.
    Tensor ids = Tensor::empty({2 * chunk * kBatch}, DType::I32), values = Tensor::empty({2 * chunk * kBatch});
    for (int64_t local = 0; local < 2 * chunk; ++local)
      for (int64_t b = 0; b < kBatch; ++b) {
        const int64_t s = chunks[local / chunk] * chunk + local % chunk;
        ids.i32()[local * kBatch + b] = value_at(s, b);
        values.f32()[local * kBatch + b] = static_cast<float>(value_at(s, b)) / 8;
      }
    for (int k = 1; k <= 3; ++k) {  // as MTP's depths roll again and again
      ids = roll_left(ids, kBatch, &context);
      values = roll_left(values, kBatch, &context);
      for (int64_t local = 0; local < 2 * chunk; ++local)
        for (int64_t b = 0; b < kBatch; ++b) {
          const int64_t s = chunks[local / chunk] * chunk + local % chunk;
          const int32_t want = s + k < seq ? value_at(s + k, b) : 0;
          SCOPED_TRACE(str_cat("cp ", cp, " rank ", rank, " chunk ", chunk, " roll ", k, " position ", s, " sample ", b));
          EXPECT_EQ(ids.i32()[local * kBatch + b], want);
          EXPECT_EQ(values.f32()[local * kBatch + b], static_cast<float>(want) / 8);
        }
    }
  }
}

}  // namespace
}  // namespace tessera::model
