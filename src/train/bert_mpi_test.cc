// BERT under every parallel layout reproduces its single-process run: tensor (with sequence
// parallelism), pipeline (1F1B, interleaved, ZB-H1 and ZB-V) and data parallelism, the distributed optimizer and
// activation recomputation give the single-process losses (masked LM and sentence order) of 20
// iterations and every gradient of the first (losses only with the distributed optimizer); with and without the binary head, in both layer
// orderings; and bf16 follows the single-process bf16 run.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "comm/mpi_test_main.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

using testing::split_flags;

struct Layout {
  int tp, pp, v, m;       // m: micro-batches per data-parallel replica
  std::string model;      // flags that change the model or its arithmetic (the reference gets them too)
  std::string layout;     // flags of the layout only
};

std::string flags(int tp, int pp, int v, int64_t global_batch, int iters, const std::string& extra) {
  return "--model-family bert --hidden-dropout 0.1 --attention-dropout 0.1 " +
         testing::pipeline_model_flags(tp, pp, v, global_batch, iters, extra);
}

Trainer& reference(int64_t global_batch, int iters, const std::string& model) {
  static std::map<std::string, std::unique_ptr<Trainer>> cache;
  auto& t = cache[str_cat(global_batch, "/", iters, "/", model)];
  if (!t) {
    t = std::make_unique<Trainer>(parse_train_arguments(split_flags(flags(1, 1, 1, global_batch, iters, model))));
    t->train();
  }
  return *t;
}

void expect_gradients_match(Trainer& t, Trainer& single, float tolerance) {
  for (const model::Parameter& p : t.parameters().params()) {
    const model::Parameter& ref = single.parameters().get(p.spec.name);
    float scale = 0, worst = 0;
    for (int64_t i = 0; i < ref.grad.numel(); ++i) scale = std::max(scale, std::abs(ref.grad.f32()[i]));
    int64_t worst_at = 0;
    for (int64_t i = 0; i < p.grad.numel(); ++i) {
      const int64_t g = p.spec.sharding.sharded() ? p.spec.sharding.global_index(i) : i;
      const float err = std::abs(p.grad.f32()[i] - ref.grad.f32()[g]);
      if (err > worst) worst = err, worst_at = i;
    }
    // The floor: a tensor whose gradients nearly cancel (the two-way head's biases) is compared to
    // float rounding of its terms.
    EXPECT_LE(worst, tolerance * scale + 1e-8f) << p.spec.name << " element " << worst_at;
  }
}

std::vector<Layout> layouts_for(int world) {
  const std::vector<Layout> all{
      {1, 1, 1, 4, "", "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2"},
      {1, 1, 1, 4, "--bert-no-binary-head", "--use-distributed-optimizer"},
      {2, 1, 1, 2, "", "--sequence-parallel"},
      {2, 1, 1, 2, "--apply-residual-connection-post-layernorm", ""},
      {1, 2, 1, 4, "", ""},
      {1, 2, 2, 4, "--bert-no-binary-head", ""},
      {2, 2, 1, 4, "", "--sequence-parallel --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 3000"},
      {2, 2, 2, 4, "--apply-residual-connection-post-layernorm", "--recompute-activations"},
      {1, 4, 1, 4, "", "--recompute-granularity full --recompute-method block --recompute-num-layers 1"},
      {4, 1, 1, 2, "--bert-no-binary-head", "--sequence-parallel"},
      {2, 4, 1, 4, "", "--sequence-parallel --use-distributed-optimizer"},
      // Zero bubble: ZB-V's rank 0 holds the embedding and the heads, tied to its word embedding.
      {1, 2, 1, 3, "", "--zero-bubble-v-schedule"},
      {2, 2, 1, 4, "--bert-no-binary-head", "--enable-zero-bubble --sequence-parallel"},
  };
  std::vector<Layout> out;
  for (const Layout& l : all)
    // The zero-bubble layouts without data parallelism only (pipeline_mpi_test has them with it); at 8 ranks
    // the layouts of 4 or 8 model ranks, those of 1 or 2 having run with data parallelism at 2 and 4 (CI time).
    if (world % (l.tp * l.pp) == 0 && (l.layout.find("zero-bubble") == std::string::npos || world == l.tp * l.pp) &&
        (world < 8 || l.tp * l.pp >= 4))
      out.push_back(l);
  return out;
}

void expect_losses_match(Trainer& t, Trainer& single, double tolerance) {
  ASSERT_EQ(t.losses().size(), single.losses().size());
  for (size_t i = 0; i < t.losses().size(); ++i)
    EXPECT_NEAR(t.losses()[i], single.losses()[i], tolerance * std::abs(single.losses()[i])) << "iteration " << i + 1;
  ASSERT_EQ(t.auxiliary_losses().size(), single.auxiliary_losses().size());
  for (const auto& [name, values] : single.auxiliary_losses()) {
    const std::vector<double>& mine = t.auxiliary_losses().at(name);
    ASSERT_EQ(mine.size(), values.size());
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_NEAR(mine[i], values[i], tolerance * std::abs(values[i])) << name << " at iteration " << i + 1;
  }
}

TEST(BertLayouts, LossesAndGradientsMatchTheSingleProcessRun) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  for (const Layout& l : layouts_for(n)) {
    const int dp = n / (l.tp * l.pp);
    const int64_t global_batch = static_cast<int64_t>(l.m) * dp;
    SCOPED_TRACE(str_cat("tp=", l.tp, " pp=", l.pp, " v=", l.v, " dp=", dp, " m=", l.m, " ", l.model, " ", l.layout));
    Trainer t(parse_train_arguments(split_flags(flags(l.tp, l.pp, l.v, global_batch, 20, l.model + " " + l.layout)), n),
              world.get());
    t.train();
    Trainer& single = reference(global_batch, 20, l.model);
    expect_losses_match(t, single, 1e-5);
    EXPECT_EQ(single.auxiliary_losses().count("sop loss"), l.model.find("no-binary-head") == std::string::npos ? 1u : 0u);

    // The distributed optimizer leaves each rank only its piece of the reduced gradients; its losses
    // above are the check.
    if (l.layout.find("--use-distributed-optimizer") != std::string::npos) continue;
    Trainer one(parse_train_arguments(split_flags(flags(l.tp, l.pp, l.v, global_batch, 1, l.model + " " + l.layout)), n),
                world.get());
    one.train();
    expect_gradients_match(one, reference(global_batch, 1, l.model), 1e-5f);
  }
}

// bf16 GEMM inputs: a layout's partial sums round at other places than one process's, so it follows the
// single-process bf16 run closely rather than bitwise.
TEST(BertLayouts, Bf16FollowsTheSingleProcessBf16Run) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  if (n % 2 != 0) GTEST_SKIP() << "needs an even number of ranks (tp 2), has " << n;
  const int dp = n / 2;
  Trainer t(parse_train_arguments(split_flags(flags(2, 1, 1, 2 * dp, 10, "--bf16 --sequence-parallel")), n), world.get());
  t.train();
  Trainer& single = reference(2 * dp, 10, "--bf16");
  expect_losses_match(t, single, 2e-3);
  // And bf16 is near fp32, but not equal to it: the rounding happened.
  Trainer& fp32 = reference(2 * dp, 10, "");
  EXPECT_NE(single.losses()[5], fp32.losses()[5]);
  EXPECT_NEAR(single.losses()[5], fp32.losses()[5], 2e-2 * std::abs(fp32.losses()[5]));
}

// A checkpoint saved at tp 2 x pp 2 (the heads on the last stage, the embedding's tied copy there)
// resumes in one process to the uninterrupted single-process run's losses, bit for bit in the sums.
TEST(BertLayouts, CheckpointReshardsAndResumes) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  if (n < 4) GTEST_SKIP() << "needs 4 ranks (tp 2 x pp 2), has " << n;
  namespace fs = std::filesystem;
  const fs::path dir = testing::shared_scratch_dir(*world, str_cat("tessera_bert_ckpt_np", n));
  if (world->rank() == 0) fs::remove_all(dir);
  world->barrier();
  const int dp = n / 4;
  Trainer& single = reference(4 * dp, 20, "");
  Trainer first(parse_train_arguments(split_flags(flags(2, 2, 1, 4 * dp, 20, "--exit-interval 8 --save " + dir.string())), n),
                world.get());
  first.train();
  ASSERT_EQ(first.losses().size(), 8u);
  world->barrier();
  Trainer resumed(parse_train_arguments(split_flags(flags(1, 1, 1, 4 * dp, 20, "--load " + dir.string()))));
  EXPECT_EQ(resumed.iteration(), 8);
  resumed.train();
  ASSERT_EQ(resumed.losses().size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(resumed.losses()[i], single.losses()[8 + i], 1e-5 * std::abs(single.losses()[8 + i])) << "iteration " << 9 + i;
    EXPECT_NEAR(resumed.auxiliary_losses().at("sop loss")[i], single.auxiliary_losses().at("sop loss")[8 + i],
                1e-5 * single.auxiliary_losses().at("sop loss")[8 + i]);
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::train
