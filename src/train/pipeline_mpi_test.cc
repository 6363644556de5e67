// Pipeline parallelism (1F1B and interleaved), alone and combined with tensor, sequence and data
// parallelism and with activation recomputation, reproduces the single-process run without
// recomputation: the losses of 20 iterations and every gradient.
#include <gtest/gtest.h>

#include <cmath>
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

std::string flags(int tp, int pp, int v, int64_t global_batch, int iters, const std::string& extra) {
  return testing::pipeline_model_flags(tp, pp, v, global_batch, iters, extra);
}

// The single-process run for a global batch and model flags, computed once per process.
Trainer& reference(int64_t global_batch, int iters, const std::string& extra) {
  static std::map<std::string, std::unique_ptr<Trainer>> cache;
  std::string key = str_cat(global_batch, "/", iters, "/", extra);
  auto& t = cache[key];
  if (!t) {
    t = std::make_unique<Trainer>(parse_train_arguments(split_flags(flags(1, 1, 1, global_batch, iters, extra))));
    t->train();
  }
  return *t;
}

// Every parameter this rank holds (its shard, its stage's layers) has the gradient of the same slice of
// the single-process model's parameter, to 1e-5 of that tensor's largest gradient.
void expect_gradients_match(Trainer& t, Trainer& single) {
  model::ParameterSet& ref_params = single.parameters();
  for (const model::Parameter& p : t.parameters().params()) {
    const model::Parameter& ref = ref_params.get(p.spec.name);
    float scale = 0;
    for (int64_t i = 0; i < ref.grad.numel(); ++i) scale = std::max(scale, std::abs(ref.grad.f32()[i]));
    float worst = 0;
    int64_t worst_at = 0;
    for (int64_t i = 0; i < p.grad.numel(); ++i) {
      int64_t g = p.spec.sharding.sharded() ? p.spec.sharding.global_index(i) : i;
      float err = std::abs(p.grad.f32()[i] - ref.grad.f32()[g]);
      if (err > worst) worst = err, worst_at = i;
    }
    EXPECT_LE(worst, 1e-5f * scale + 1e-9f) << p.spec.name << " element " << worst_at << " of "
                                            << p.grad.numel();
  }
}

std::vector<Layout> layouts_for(int world) {
  const std::vector<Layout> all{
      {1, 2, 1, 2, ""},
      {1, 2, 2, 4, ""},
      {1, 2, 1, 8, "--untie-embeddings-and-output-weights --recompute-granularity full --recompute-method uniform "
                   "--recompute-num-layers 2"},
      {1, 4, 1, 4, ""},
      {1, 4, 2, 8, "--untie-embeddings-and-output-weights --recompute-granularity full --recompute-method block "
                   "--recompute-num-layers 1"},
      {1, 4, 1, 16, "--overlap-grad-reduce --ddp-bucket-size 3000"},
      {2, 2, 1, 4, "--sequence-parallel --recompute-activations"},
      {2, 2, 2, 2, ""},
      {2, 2, 2, 8, "--sequence-parallel --untie-embeddings-and-output-weights --overlap-grad-reduce "
                   "--ddp-bucket-size 2000"},
      {2, 4, 2, 4, "--sequence-parallel --recompute-granularity full --recompute-method uniform"},
      {2, 4, 2, 8, ""},
      {1, 8, 1, 8, ""},
  };
  std::vector<Layout> out;
  for (const Layout& l : all)
    if (world % (l.tp * l.pp) == 0) out.push_back(l);
  return out;
}

TEST(PipelineLayouts, LossesAndGradientsMatchTheSingleProcessRun) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  std::vector<Layout> layouts = layouts_for(n);
  if (layouts.empty()) GTEST_SKIP() << "no pipeline layout fits " << n << " rank(s)";
  for (const Layout& l : layouts) {
    const int dp = n / (l.tp * l.pp);
    const int64_t global_batch = static_cast<int64_t>(l.m) * dp;
    // The reference does not know about the layout's communication flags.
    std::string model_flags = l.extra.find("untie") != std::string::npos ? "--untie-embeddings-and-output-weights"
                                                                          : "";
    SCOPED_TRACE(str_cat("tp=", l.tp, " pp=", l.pp, " v=", l.v, " dp=", dp, " m=", l.m, " ", l.extra));
    Trainer t(parse_train_arguments(split_flags(flags(l.tp, l.pp, l.v, global_batch, 20, l.extra)), n),
              world.get());
    t.train();
    Trainer& single = reference(global_batch, 20, model_flags);
    ASSERT_EQ(t.losses().size(), single.losses().size());
    for (size_t i = 0; i < t.losses().size(); ++i)
      EXPECT_NEAR(t.losses()[i], single.losses()[i], 1e-5 * std::abs(single.losses()[i])) << "iteration " << i + 1;

    // Gradients of one step from the initial weights.
    Trainer one(parse_train_arguments(split_flags(flags(l.tp, l.pp, l.v, global_batch, 1, l.extra)), n),
                world.get());
    one.train();
    expect_gradients_match(one, reference(global_batch, 1, model_flags));
  }
}

TEST(PipelineLayouts, BadLayoutsAreRejectedBeforeTraining) {
  auto expect_error = [](const std::string& f, int world, const std::string& needle) {
    try {
      parse_train_arguments(split_flags(f), world);
      ADD_FAILURE() << "accepted: " << f;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // 8 layers over 3 stages.
  expect_error(flags(1, 3, 1, 3, 1, ""), 3, "--num-layers");
  // 3 micro-batches with the interleaved schedule on 2 stages.
  expect_error(flags(1, 2, 2, 3, 1, ""), 2, "multiple of --pipeline-model-parallel-size");
  // 3 chunks per rank do not divide 4 layers per stage.
  expect_error(flags(1, 2, 3, 4, 1, ""), 2, "--num-virtual-stages-per-pipeline-rank");
  // Interleaving without a pipeline.
  expect_error(flags(1, 1, 2, 4, 1, ""), 1, "--pipeline-model-parallel-size > 1");
}

}  // namespace
}  // namespace tessera::train
