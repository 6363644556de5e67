// Knowledge distillation under tensor (with and without sequence parallelism), data and pipeline
// parallelism (1F1B and interleaved) reproduces the single-process run: the lm loss and the kd loss of
// every iteration, the KD term stopping after iteration 3 of 4. The teachers (a wider dense model and a
// deeper MoE) are saved at another layout than the students load them at, and run on the last stage only.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "comm/mpi_test_main.h"
#include "kernels/tensor_ops.h"
#include "model/vocab_parallel_distillation.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;
using testing::split_flags;

struct Layout {
  int tp, pp, v, m;  // m: micro-batches per data-parallel replica
  std::string extra;
};

constexpr int kIterations = 4, kStop = 3;

// The teachers' flags at tensor-parallel size tp over n ranks (padded vocabulary 64, as the students').
std::string teacher_flags(const std::string& name, int tp, int n) {
  const std::string shape = name == "wide" ? "--num-layers 3 --hidden-size 64 --ffn-hidden-size 96"
                                           : "--num-layers 3 --hidden-size 32 --num-experts 4 --moe-layer-freq 2 "
                                             "--moe-router-topk 2 --moe-ffn-hidden-size 32";
  return str_cat(shape, " --num-attention-heads 4 --seq-length 16 --mock-data --tokenizer-type NullTokenizer "
                 "--vocab-size 40 --micro-batch-size 1 --lr 3e-3 --train-iters 2 --log-interval 100 --eval-iters 0 "
                 "--global-batch-size ", n / tp, " --make-vocab-size-divisible-by ", 64 / tp,
                 " --tensor-model-parallel-size ", tp, tp > 1 ? " --sequence-parallel" : "");
}

std::string student_flags(const Layout& l, int64_t global_batch, const fs::path& teacher) {
  return testing::pipeline_model_flags(
      l.tp, l.pp, l.v, global_batch, kIterations,
      str_cat(l.extra, " --kd --kd-temp 2 --kd-alpha-ce 0.5 --kd-beta-ce 1.5 --kd-stop-iteration ", kStop,
              " --load-teacher ", teacher.string()));
}

// The single-process run, computed once per process and teacher.
Trainer& reference(const Layout& l, int64_t global_batch, const fs::path& teacher) {
  static std::map<std::string, std::unique_ptr<Trainer>> cache;
  const std::string key = student_flags({1, 1, 1, l.m, ""}, global_batch, teacher);
  auto& t = cache[key];
  if (!t) {
    t = std::make_unique<Trainer>(parse_train_arguments(split_flags(key)));
    t->train();
  }
  return *t;
}

TEST(DistillationLayouts, LossesMatchTheSingleProcessRun) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  const std::vector<Layout> all{{1, 1, 1, 2, ""},
                                {2, 1, 1, 2, ""},
                                {2, 1, 1, 2, "--sequence-parallel"},
                                {1, 2, 1, 4, ""},
                                {1, 2, 2, 4, ""},
                                {2, 2, 1, 4, "--sequence-parallel --use-distributed-optimizer"},
                                {4, 1, 1, 2, "--sequence-parallel"}};
  std::vector<Layout> layouts;
  for (const Layout& l : all)
    if (n % (l.tp * l.pp) == 0 && (n > 1 || l.tp * l.pp > 1)) layouts.push_back(l);
  if (n == 1) GTEST_SKIP() << "one rank: nothing but the single-process run";

  // The teachers, trained and saved by the whole world at tensor-parallel size 2 (or 1).
  const fs::path dir = testing::shared_scratch_dir(*world, str_cat("tessera_distillation_mpi_np", n));
  if (world->rank() == 0) fs::remove_all(dir);
  world->barrier();
  const int teacher_tp = n % 2 == 0 ? 2 : 1;
  for (const std::string name : {"wide", "moe"}) {
    Trainer t(parse_train_arguments(split_flags(teacher_flags(name, teacher_tp, n) + " --save " + (dir / name).string()),
                                    n),
              world.get());
    t.train();
  }

  const char* kd = model::kDistillationLossName;
  for (const Layout& l : layouts) {
    const int dp = n / (l.tp * l.pp);
    const int64_t global_batch = static_cast<int64_t>(l.m) * dp;
    // The MoE teacher needs --sequence-parallel under tensor parallelism (each tensor rank routes its shard).
    const fs::path teacher = dir / (l.tp == 1 || l.extra.find("--sequence-parallel") != std::string::npos ? "moe" : "wide");
    SCOPED_TRACE(str_cat("tp=", l.tp, " pp=", l.pp, " v=", l.v, " dp=", dp, " ", l.extra, " teacher ", teacher.string()));
    Trainer t(parse_train_arguments(split_flags(student_flags(l, global_batch, teacher)), n), world.get());
    t.train();
    Trainer& single = reference(l, global_batch, teacher);
    ASSERT_EQ(t.losses().size(), single.losses().size());
    const std::vector<double>& term = t.auxiliary_losses().at(kd);
    const std::vector<double>& single_term = single.auxiliary_losses().at(kd);
    for (size_t i = 0; i < t.losses().size(); ++i) {
      EXPECT_NEAR(t.losses()[i], single.losses()[i], 1e-5 * std::abs(single.losses()[i])) << "iteration " << i + 1;
      EXPECT_NEAR(term[i], single_term[i], 1e-5 * std::abs(single_term[i]) + 1e-7) << "iteration " << i + 1;
      if (static_cast<int>(i) < kStop) EXPECT_GT(term[i], 0.0) << "iteration " << i + 1;
      else EXPECT_EQ(term[i], 0.0) << "iteration " << i + 1;
    }
    // The teacher ran on the last stage's ranks only, once per micro-batch of the distilled iterations.
    Tensor forwards = kernels::scalar_tensor(static_cast<double>(t.teacher_forwards()));
    world->all_reduce(forwards);
    EXPECT_EQ(kernels::scalar_value(forwards), static_cast<double>(n / l.pp * kStop * l.m));
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::train
