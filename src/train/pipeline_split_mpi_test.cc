// Megatron-Core's counted pipeline split (--account-for-embedding-in-pipeline-split,
// --account-for-loss-in-pipeline-split: the embedding and the loss count as one layer each, so the first
// and last model chunks build one transformer layer fewer, possibly none) reproduces the single-process
// run: the losses of 10 iterations and every gradient, alone and with interleaving, tensor and sequence
// parallelism and full recomputation; and a checkpoint saved with it names the layers globally, so it
// resumes in one process as the single-process run continues.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "ckpt/checkpoint.h"
#include "comm/mpi_test_main.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

using testing::split_flags;

constexpr const char* kBoth = "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split";

struct Layout {
  int tp, pp, v, m;       // m: micro-batches per data-parallel replica
  std::string split;      // the counted split's flags and --num-layers (the reference's model too)
  std::string extra;      // the layout's other flags
};

std::string flags(const Layout& l, int64_t global_batch, int iters, bool parallel) {
  const std::string model = l.split.substr(l.split.find("--num-layers"));
  return testing::pipeline_model_flags(parallel ? l.tp : 1, parallel ? l.pp : 1, parallel ? l.v : 1, global_batch,
                                       iters, parallel ? l.split + " " + l.extra : model);
}

// The single-process run of a model (its --num-layers) for a global batch, computed once per process.
Trainer& reference(const Layout& l, int64_t global_batch, int iters) {
  static std::map<std::string, std::unique_ptr<Trainer>> cache;
  auto& t = cache[flags(l, global_batch, iters, false)];
  if (!t) {
    t = std::make_unique<Trainer>(parse_train_arguments(split_flags(flags(l, global_batch, iters, false))));
    t->train();
  }
  return *t;
}

void expect_gradients_match(Trainer& t, Trainer& single) {
  model::ParameterSet& ref_params = single.parameters();
  for (const model::Parameter& p : t.parameters().params()) {
    const model::Parameter& ref = ref_params.get(p.spec.name);
    float scale = 0;
    for (int64_t i = 0; i < ref.grad.numel(); ++i) scale = std::max(scale, std::abs(ref.grad.host_f32()[i]));
    float worst = 0;
    for (int64_t i = 0; i < p.grad.numel(); ++i) {
      const int64_t g = p.spec.sharding.sharded() ? p.spec.sharding.global_index(i) : i;
      worst = std::max(worst, std::abs(p.grad.host_f32()[i] - ref.grad.host_f32()[g]));
    }
    EXPECT_LE(worst, 1e-5f * scale + 1e-9f) << p.spec.name;
  }
}

const std::vector<Layout>& all_layouts() {
  // The transformer layers per stage in the comments.
  static const std::vector<Layout> all{
      {1, 2, 1, 4, "--account-for-embedding-in-pipeline-split --num-layers 7", ""},  // 3 4
      {1, 2, 1, 4, "--account-for-loss-in-pipeline-split --num-layers 7", ""},  // 4 3
      {1, 2, 2, 4, str_cat(kBoth, " --num-layers 6"), ""},  // 3 3: model chunks of 1, 2, 2, 1
      {1, 2, 1, 8, str_cat(kBoth, " --num-layers 6"),
       "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"},  // 3 3
      {1, 4, 1, 4, str_cat(kBoth, " --num-layers 6"), ""},  // 1 2 2 1
      {1, 4, 1, 4, str_cat(kBoth, " --num-layers 2"), ""},  // 0 1 1 0: the embedding, the loss alone
      {2, 2, 1, 4, str_cat(kBoth, " --num-layers 6"),
       "--sequence-parallel --untie-embeddings-and-output-weights"},  // 3 3
  };
  return all;
}

TEST(CountedPipelineSplit, LossesAndGradientsMatchTheSingleProcessRun) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  int ran = 0;
  for (const Layout& l : all_layouts()) {
    // Each layout at its own model size and with data parallelism 2 (at 8 ranks only those of 4 model ranks).
    if (n % (l.tp * l.pp) != 0 || n / (l.tp * l.pp) > 2) continue;
    ++ran;
    const int dp = n / (l.tp * l.pp);
    const int64_t global_batch = static_cast<int64_t>(l.m) * dp;
    SCOPED_TRACE(str_cat("tp=", l.tp, " pp=", l.pp, " v=", l.v, " dp=", dp, " ", l.split, " ", l.extra));
    // Untied embeddings are the reference's model too.
    Layout ref = l;
    if (l.extra.find("--untie") != std::string::npos) ref.split += " --untie-embeddings-and-output-weights";
    Trainer t(parse_train_arguments(split_flags(flags(l, global_batch, 10, true)), n), world.get());
    t.train();
    Trainer& single = reference(ref, global_batch, 10);
    ASSERT_EQ(t.losses().size(), single.losses().size());
    for (size_t i = 0; i < t.losses().size(); ++i)
      EXPECT_NEAR(t.losses()[i], single.losses()[i], 1e-5 * std::abs(single.losses()[i])) << "iteration " << i + 1;
    Trainer one(parse_train_arguments(split_flags(flags(l, global_batch, 1, true)), n), world.get());
    one.train();
    expect_gradients_match(one, reference(ref, global_batch, 1));
  }
  if (ran == 0) GTEST_SKIP() << "no counted-split layout fits " << n << " rank(s)";
}

// Saved at pp 4 with 1, 2, 2, 1 layers per stage, the checkpoint holds the single-process model's tensors
// (layers numbered globally) and resumes in one process as the single-process run continues.
TEST(CountedPipelineSplit, CheckpointResumesInOneProcess) {
  namespace fs = std::filesystem;
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  if (n != 4) GTEST_SKIP() << "pp 4 on 4 ranks, has " << n;
  const Layout l{1, 4, 1, 4, str_cat(kBoth, " --num-layers 6"), ""};
  Trainer& single = reference(l, 4, 6);
  const fs::path dir = testing::shared_scratch_dir(*world, "tessera_counted_split");
  if (world->rank() == 0) fs::remove_all(dir);
  world->barrier();
  Layout saving = l;
  saving.extra = "--save " + dir.string();
  Trainer parallel(parse_train_arguments(split_flags(flags(saving, 4, 3, true)), n), world.get());
  parallel.train();
  world->barrier();
  std::vector<std::string> saved = ckpt::latest_model_tensor_names(dir.string()), want;
  for (const model::Parameter& p : single.parameters().params()) want.push_back(p.spec.name);
  std::sort(saved.begin(), saved.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(saved, want);

  Trainer resumed(parse_train_arguments(split_flags(flags(l, 4, 6, false) + " --load " + dir.string())));
  EXPECT_EQ(resumed.iteration(), 3);
  resumed.train();
  ASSERT_EQ(resumed.losses().size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(resumed.losses()[i], single.losses()[3 + i], 1e-5 * std::abs(single.losses()[3 + i]))
        << "iteration " << 4 + i;
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::train
