// Under data parallelism, data-parallel rank r's micro-batch m of an iteration starting at sample k is
// samples k + (m x dp + r) x mbs onward of what `tessera samples` prints (Megatron's sampler), as the
// README says: the printed sample numbers locate a sample in the run at any world size.
#include <gtest/gtest.h>

#include <string>

#include "comm/mpi_test_main.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"
#include "train/training_data.h"
#include "train/training_data_testing.h"

namespace tessera::train {
namespace {

void expect_rank_rows_are_samples(const std::string& family, bool bert) {
  auto world = comm::make_mpi_world_group();
  const int64_t dp = world->size(), rank = world->rank();
  const TrainArguments a = parse_train_arguments(
      testing::split_flags(str_cat("--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 "
                                   "--mock-data --tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 "
                                   "--lr 1e-3 --train-iters 1 --global-batch-size ", 4 * dp, " ", family)),
      dp);
  ASSERT_EQ(a.data_parallel_size(), dp);
  Trainer trainer(a, world.get());
  const auto sources = build_batch_sources(a);
  for (int64_t m = 0; m < a.num_micro_batches; ++m) {
    const model::MicroBatch mb = trainer.next_micro_batch(m);
    for (int64_t b = 0; b < a.micro_batch_size; ++b) {
      const int64_t sample = (m * dp + rank) * a.micro_batch_size + b;
      SCOPED_TRACE(str_cat("rank ", rank, ", micro-batch ", m, ", row ", b, ", sample ", sample));
      if (bert) {
        testing::expect_bert_row(mb, b, sources[0]->megatron_sample(sample));
      } else {
        testing::expect_gpt_row(mb, b, sources[0]->megatron_sample(sample));
      }
    }
  }
}

TEST(TrainingDataParallel, GptRankRowsAreTheSamplesOfTheirPlace) { expect_rank_rows_are_samples("", false); }

TEST(TrainingDataParallel, BertRankRowsAreTheSamplesOfTheirPlace) {
  expect_rank_rows_are_samples("--model-family bert", true);
}

}  // namespace
}  // namespace tessera::train
