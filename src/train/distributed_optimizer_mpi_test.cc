// The distributed optimizer (--use-distributed-optimizer, optionally --overlap-param-gather) combined
// with tensor, sequence, pipeline (1F1B and interleaved) and data parallelism reproduces the
// single-process run's losses over 20 iterations, and the parameters of the same layout trained with
// AdamW. Its state per rank is 1/dp of AdamW's, and a run resumed from its checkpoint continues bit for
// bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "comm/mpi_test_main.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

struct Layout {
  int tp, pp, v, m;  // m: micro-batches per data-parallel replica
  std::string extra;
};

using testing::split_flags;

// testing::pipeline_model_flags without linear biases: the key bias has a gradient that is zero up to
// rounding, which Adam's normalisation turns into full-size updates of arbitrary sign, so it would differ
// between any two layouts without changing a loss.
std::string flags(int tp, int pp, int v, int64_t global_batch, int iters, const std::string& extra) {
  return testing::pipeline_model_flags(tp, pp, v, global_batch, iters, "--disable-bias-linear " + extra);
}

// The single-process run (plain AdamW) for a global batch and model flags, computed once per process.
Trainer& reference(int64_t global_batch, const std::string& model_flags) {
  static std::map<std::string, std::unique_ptr<Trainer>> cache;
  auto& t = cache[str_cat(global_batch, "/", model_flags)];
  if (!t) {
    t = std::make_unique<Trainer>(parse_train_arguments(split_flags(flags(1, 1, 1, global_batch, 20, model_flags))));
    t->train();
  }
  return *t;
}

// Every parameter equals the one of the same layout trained with AdamWOptimizer, to 1e-5 of that
// tensor's largest value. (Against the single-process run, Adam's normalisation turns the rounding
// differences of a layout's reductions in the few near-zero gradients into differences a little larger
// than that; the losses are compared with the single-process run instead.)
void expect_parameters_match(Trainer& t, Trainer& plain) {
  for (const model::Parameter& p : t.parameters().params()) {
    const model::Parameter& ref = plain.parameters().get(p.spec.name);
    ASSERT_EQ(p.value.numel(), ref.value.numel()) << p.spec.name;
    float scale = 0, worst = 0;
    int64_t worst_at = 0;
    for (int64_t i = 0; i < ref.value.numel(); ++i) {
      scale = std::max(scale, std::abs(ref.value.f32()[i]));
      float err = std::abs(p.value.f32()[i] - ref.value.f32()[i]);
      if (err > worst) worst = err, worst_at = i;
    }
    EXPECT_LE(worst, 1e-5f * scale) << p.spec.name << " element " << worst_at << " of " << p.value.numel();
  }
}

// Odd bucket sizes, so that buckets have tails that do not divide over the data-parallel ranks.
std::vector<Layout> layouts_for(int world) {
  const std::vector<Layout> all{
      {1, 1, 1, 2, "--overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 1001"},
      {1, 1, 1, 1, "--ddp-bucket-size 40000000"},
      {2, 1, 1, 2, "--sequence-parallel --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 777"},
      {1, 2, 1, 4, "--overlap-grad-reduce --ddp-bucket-size 3001"},
      {1, 2, 2, 4, "--untie-embeddings-and-output-weights --overlap-grad-reduce --overlap-param-gather "
                   "--ddp-bucket-size 2001"},
      {2, 2, 2, 2, "--sequence-parallel --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 1999"},
      {2, 2, 1, 4, ""},
  };
  std::vector<Layout> out;
  for (const Layout& l : all)
    if (world % (l.tp * l.pp) == 0) out.push_back(l);
  return out;
}

TEST(DistributedOptimizer, LossesAndParametersMatchTheSingleProcessRun) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  for (const Layout& l : layouts_for(n)) {
    const int dp = n / (l.tp * l.pp);
    const int64_t global_batch = static_cast<int64_t>(l.m) * dp;
    std::string model_flags = l.extra.find("untie") != std::string::npos ? "--untie-embeddings-and-output-weights"
                                                                          : "";
    SCOPED_TRACE(str_cat("tp=", l.tp, " pp=", l.pp, " v=", l.v, " dp=", dp, " m=", l.m, " ", l.extra));
    Trainer t(parse_train_arguments(
                  split_flags(flags(l.tp, l.pp, l.v, global_batch, 20, l.extra + " --use-distributed-optimizer")), n),
              world.get());
    t.train();
    Trainer& single = reference(global_batch, model_flags);
    ASSERT_EQ(t.losses().size(), single.losses().size());
    for (size_t i = 0; i < t.losses().size(); ++i)
      EXPECT_NEAR(t.losses()[i], single.losses()[i], 1e-5 * std::abs(single.losses()[i])) << "iteration " << i + 1;
    std::string plain_extra = l.extra;
    if (auto at = plain_extra.find("--overlap-param-gather"); at != std::string::npos) plain_extra.erase(at, 22);
    Trainer plain(parse_train_arguments(split_flags(flags(l.tp, l.pp, l.v, global_batch, 20, plain_extra)), n),
                  world.get());
    plain.train();
    expect_parameters_match(t, plain);
  }
}

TEST(DistributedOptimizer, StatePerRankIsOneOverDataParallelSize) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  if (n % 4 != 0) GTEST_SKIP() << "needs a multiple of 4 ranks";
  const int tp = n / 4;  // data-parallel size 4
  if (tp > 1) GTEST_SKIP() << "compares against one process, which holds tp = 1";
  Trainer plain(parse_train_arguments(split_flags(flags(tp, 1, 1, 4, 1, ""))));
  Trainer sharded(parse_train_arguments(split_flags(flags(tp, 1, 1, 4, 1, "--use-distributed-optimizer")), n),
                  world.get());
  const double ratio = static_cast<double>(sharded.optimizer().state_bytes()) /
                       static_cast<double>(plain.optimizer().state_bytes());
  EXPECT_NEAR(ratio, 0.25, 0.25 * 0.05) << sharded.optimizer().state_bytes() << " of "
                                        << plain.optimizer().state_bytes() << " bytes";
  // And a run of one step keeps to it.
  sharded.train();
  EXPECT_NEAR(static_cast<double>(sharded.optimizer().state_bytes()) / plain.optimizer().state_bytes(), 0.25, 0.0125);
}

TEST(DistributedOptimizer, ResumeFromItsCheckpointIsBitExactAndAdamWResumesFromItToo) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  const int tp = n % 2 == 0 && n > 2 ? 2 : 1;
  namespace fs = std::filesystem;
  fs::path dir = testing::shared_scratch_dir(*world, str_cat("tessera_distopt_mpi_resume_np", n));
  if (world->rank() == 0) fs::remove_all(dir);
  world->barrier();
  const int64_t global_batch = 2 * (n / tp);
  std::string base = flags(tp, 1, 1, global_batch, 20,
                           str_cat(tp > 1 ? "--sequence-parallel " : "",
                                   "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather "
                                   "--ddp-bucket-size 999"));
  Trainer full(parse_train_arguments(split_flags(base), n), world.get());
  full.train();
  Trainer first(parse_train_arguments(split_flags(base + " --train-iters 10 --save " + dir.string()), n),
                world.get());
  first.train();
  // Every data-parallel rank wrote the moments it owns into its own file; none wrote all of them.
  if (world->rank() == 0) {
    const int dp = n / tp;
    for (int t = 0; t < tp; ++t) {
      uintmax_t total = 0, largest = 0;
      for (int d = 0; d < dp; ++d) {
        fs::path file = dir / "iter_0000010" / str_cat("optim.tp0", t, ".pp00.dp00", d, ".safetensors");
        ASSERT_TRUE(fs::exists(file)) << file;
        total += fs::file_size(file);
        largest = std::max(largest, fs::file_size(file));
      }
      if (dp > 1) {
        EXPECT_LT(largest * dp, 2 * total) << "one data-parallel rank wrote most of the moments";
      }
    }
  }
  Trainer second(parse_train_arguments(split_flags(base + " --load " + dir.string()), n), world.get());
  EXPECT_EQ(second.iteration(), 10);
  EXPECT_EQ(second.optimizer().steps(), 10);
  second.train();
  ASSERT_EQ(second.losses().size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(second.losses()[i], full.losses()[10 + i]) << "iteration " << 11 + i;
  for (const model::Parameter& p : second.parameters().params()) {
    const model::Parameter& q = full.parameters().get(p.spec.name);
    EXPECT_EQ(0, std::memcmp(p.value.f32(), q.value.f32(), p.value.nbytes())) << p.spec.name;
  }
  // The checkpoint holds the moments in AdamW's per-parameter layout: a run without the distributed
  // optimizer resumes from it too (to rounding: its reductions are ordered differently).
  std::string plain = flags(tp, 1, 1, global_batch, 20, tp > 1 ? "--sequence-parallel" : "");
  Trainer third(parse_train_arguments(split_flags(plain + " --load " + dir.string()), n), world.get());
  EXPECT_EQ(third.optimizer().steps(), 10);
  third.train();
  ASSERT_EQ(third.losses().size(), 10u);
  for (size_t i = 0; i < 10; ++i)
    EXPECT_NEAR(third.losses()[i], full.losses()[10 + i], 1e-5 * std::abs(full.losses()[10 + i])) << "iteration " << 11 + i;
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST(DistributedOptimizer, FlagRulesAreChecked) {
  auto expect_error = [](const std::string& f, const std::string& needle) {
    try {
      parse_train_arguments(split_flags(f), 1);
      ADD_FAILURE() << "accepted: " << f;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(flags(1, 1, 1, 2, 1, "--overlap-param-gather --overlap-grad-reduce"), "--use-distributed-optimizer");
  expect_error(flags(1, 1, 1, 2, 1, "--overlap-param-gather --use-distributed-optimizer"), "--overlap-grad-reduce");
}

}  // namespace
}  // namespace tessera::train
