// Resharding on load: a checkpoint saved under one tensor/sequence/data-parallel layout resumes under
// another and continues with the losses of an uninterrupted run at the new layout (relative 1e-5).
// The vocabulary is padded to 64 at every tensor-parallel size, so the two runs hold the same rows.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "comm/mpi_test_main.h"
#include "train/trainer.h"

namespace tessera::train {
namespace {

std::vector<std::string> split_flags(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string flags(int tp, const std::string& extra) {
  return str_cat(
      "--num-layers 2 --hidden-size 32 --num-attention-heads 8 --seq-length 16 --mock-data "
      "--tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 1 --global-batch-size 8 --lr 3e-3 "
      "--lr-warmup-iters 2 --lr-decay-style cosine --lr-decay-iters 20 --log-interval 100 --eval-iters 0 "
      "--train-iters 20 --make-vocab-size-divisible-by ", 64 / tp, " --tensor-model-parallel-size ", tp,
      tp > 1 ? " --sequence-parallel " : " ", extra);
}

class Resharding : public ::testing::TestWithParam<std::string> {};

TEST_P(Resharding, ResumeAtAnotherLayoutMatchesAnUninterruptedRunThere) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  const std::string model = GetParam();
  std::vector<int> tps;
  for (int tp : {1, 2, 4})
    if (n % tp == 0) tps.push_back(tp);
  if (tps.size() < 2) GTEST_SKIP() << "one layout only at " << n << " rank(s)";

  std::map<int, std::vector<double>> uninterrupted;
  for (int tp : tps) {
    Trainer t(parse_train_arguments(split_flags(flags(tp, model)), n), world.get());
    t.train();
    uninterrupted[tp] = t.losses();
  }
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "tessera_reshard_mpi_test";
  for (int save_tp : tps) {
    if (world->rank() == 0) fs::remove_all(dir);
    world->barrier();
    {
      Trainer first(parse_train_arguments(split_flags(flags(save_tp, model + " --train-iters 10 --save " + dir.string())), n),
                    world.get());
      first.train();
    }
    for (int load_tp : tps) {
      if (load_tp == save_tp) continue;
      SCOPED_TRACE(str_cat("saved at tp=", save_tp, " dp=", n / save_tp, ", resumed at tp=", load_tp, " dp=", n / load_tp));
      Trainer second(parse_train_arguments(split_flags(flags(load_tp, model + " --load " + dir.string())), n), world.get());
      EXPECT_EQ(second.iteration(), 10);
      second.train();
      const std::vector<double>& want = uninterrupted[load_tp];
      ASSERT_EQ(second.losses().size(), 10u);
      for (size_t i = 0; i < 10; ++i)
        EXPECT_NEAR(second.losses()[i], want[10 + i], 1e-5 * std::abs(want[10 + i])) << "iteration " << 11 + i;
    }
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Models, Resharding,
                         ::testing::Values("", "--position-embedding-type rope --normalization RMSNorm --swiglu "
                                               "--group-query-attention --num-query-groups 4 "
                                               "--untie-embeddings-and-output-weights --disable-bias-linear"));

}  // namespace
}  // namespace tessera::train
