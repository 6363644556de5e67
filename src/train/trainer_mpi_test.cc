// Training under every tensor/sequence/data-parallel layout of the world size reproduces the
// single-process run's losses over 20 iterations (dropout on), and resumes bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "comm/mpi_test_main.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

using testing::split_flags;

// Padded vocabulary 64 at every tp (41 ids, divisible-by 64 / tp).
std::string flags(int tp, const std::string& extra) {
  return str_cat(
      "--num-layers 2 --hidden-size 32 --num-attention-heads 8 --seq-length 16 --mock-data "
      "--tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 1 --global-batch-size 8 --lr 3e-3 "
      "--lr-warmup-iters 2 --lr-decay-style cosine --log-interval 100 --eval-iters 0 --train-iters 20 "
      "--make-vocab-size-divisible-by ",
      64 / tp, " --tensor-model-parallel-size ", tp, " ", extra);
}

class TrainingLayouts : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainingLayouts, LossesMatchTheSingleProcessRun) {
  const std::string model = GetParam();
  Trainer single(parse_train_arguments(split_flags(flags(1, model))));
  single.train();

  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  for (int tp : {1, 2, 4}) {
    if (n % tp != 0) continue;
    for (bool sp : {false, true}) {
      if (sp && tp == 1) continue;
      SCOPED_TRACE(str_cat("tp=", tp, " dp=", n / tp, sp ? " sequence-parallel" : ""));
      std::string f = flags(tp, model + (sp ? " --sequence-parallel --overlap-grad-reduce --ddp-bucket-size 500" : ""));
      Trainer t(parse_train_arguments(split_flags(f), n), world.get());
      t.train();
      ASSERT_EQ(t.losses().size(), single.losses().size());
      for (size_t i = 0; i < t.losses().size(); ++i)
        EXPECT_NEAR(t.losses()[i], single.losses()[i], 1e-5 * std::abs(single.losses()[i])) << "iteration " << i + 1;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TrainingLayouts,
                         ::testing::Values("", "--position-embedding-type rope --normalization RMSNorm --swiglu "
                                               "--group-query-attention --num-query-groups 4 "
                                               "--untie-embeddings-and-output-weights --disable-bias-linear"));

TEST(TrainingLayouts, ResumeUnderTensorAndDataParallelismIsBitExact) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  const int tp = n % 2 == 0 ? 2 : 1;
  namespace fs = std::filesystem;
  fs::path dir = testing::shared_scratch_dir(*world, str_cat("tessera_trainer_mpi_resume_np", n));
  if (world->rank() == 0) fs::remove_all(dir);
  world->barrier();
  std::string base = flags(tp, tp > 1 ? "--sequence-parallel" : "");
  Trainer full(parse_train_arguments(split_flags(base), n), world.get());
  full.train();
  Trainer first(parse_train_arguments(split_flags(base + " --train-iters 10 --lr-decay-iters 20 --save " +
                                                  dir.string()), n), world.get());
  first.train();
  Trainer second(parse_train_arguments(split_flags(base + " --load " + dir.string()), n), world.get());
  EXPECT_EQ(second.iteration(), 10);
  second.train();
  ASSERT_EQ(second.losses().size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(second.losses()[i], full.losses()[10 + i]) << "iteration " << 11 + i;
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::train
