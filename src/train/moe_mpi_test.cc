// Expert parallelism (ep experts-per-rank splits, etp splits of each expert, both dispatchers) combined
// with tensor, sequence, pipeline (1F1B, interleaved, ZB-H1 and ZB-V) and data parallelism and the distributed
// optimizer reproduces the single-process run of the same mixture-of-experts model: the losses of several
// iterations (the LM loss and the logged auxiliary losses) and every gradient of the first step,
// dropless and with a capacity, with the local experts one by one and grouped (--moe-grouped-gemm).
// DeepSeek-V3's routing (sigmoid scores, aux-loss-free expert bias, group-limited top-k) too: there the
// expert bias after several steps is the single process's bit for bit on every rank, and a run saved
// at one layout and resumed at another continues with the uninterrupted run's losses and bias. Multi-token
// prediction (issue 53) with its module's layer a mixture of experts too, and a pipeline stage of dense
// layers only under the distributed optimizer.
#include <gtest/gtest.h>

#include <algorithm>
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
  int tp, pp, ep, etp, v, m;  // m: micro-batches per data-parallel replica
  std::string model;          // flags that change the model (the reference has them too)
  std::string extra;          // flags of the layout only
};

constexpr int kIterations = 6;
constexpr int kBiasIterations = 5;

// DeepSeek-V3's router at toy size: 2 groups of 2 experts, top-2 within the best group, the bias
// moving fast enough to change routing within a few steps. It then swings by +-rate from step to step,
// so its runs take an odd number of steps (after an even number it may be back at 0 exactly).
const std::string kDeepSeekRouting =
    "--moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-bias-update-rate 2e-2 "
    "--moe-router-num-groups 2 --moe-router-group-topk 1 --moe-router-topk-scaling-factor 2.5 "
    "--moe-router-load-balancing-type seq_aux_loss";

// DeepSeek-V3's multi-token prediction: the module's layer a mixture of experts as the last layer, with
// its own router, expert bias and routing counts.
const std::string kMtp = " --mtp-num-layers 1 --mtp-loss-scaling-factor 0.3 --position-embedding-type rope";

std::string flags(const Layout& l, int64_t global_batch, int iters) {
  return str_cat("--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data "
                 "--tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 1 --lr 3e-3 --lr-warmup-iters 2 --lr-decay-iters 20 "
                 "--log-interval 100 --eval-iters 0 --hidden-dropout 0.1 --attention-dropout 0.1 "
                 "--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-aux-loss-coeff 1e-2 "
                 "--moe-z-loss-coeff 1e-3 --moe-router-pre-softmax ",
                 "--global-batch-size ", global_batch, " --train-iters ", iters,
                 " --make-vocab-size-divisible-by ", 64 / l.tp, " --tensor-model-parallel-size ", l.tp,
                 " --pipeline-model-parallel-size ", l.pp, " --expert-model-parallel-size ", l.ep,
                 " --expert-tensor-parallel-size ", l.etp,
                 l.v > 1 ? str_cat(" --num-virtual-stages-per-pipeline-rank ", l.v) : std::string(), " ", l.model, " ",
                 l.extra);
}

// The single-process run of a model, computed once per process.
Trainer& reference(const Layout& l, int64_t global_batch, int iters) {
  static std::map<std::string, std::unique_ptr<Trainer>> cache;
  const Layout single{1, 1, 1, 1, 1, l.m, l.model, ""};
  const std::string key = flags(single, global_batch, iters);
  auto& t = cache[key];
  if (!t) {
    t = std::make_unique<Trainer>(parse_train_arguments(split_flags(key)));
    t->train();
  }
  return *t;
}

void expect_gradients_match(Trainer& t, Trainer& single) {
  model::ParameterSet& ref_params = single.parameters();
  for (const model::Parameter& p : t.parameters().params()) {
    const model::Parameter& ref = ref_params.get(p.spec.name);
    float scale = 0, worst = 0;
    for (int64_t i = 0; i < ref.grad.numel(); ++i) scale = std::max(scale, std::abs(ref.grad.f32()[i]));
    for (int64_t i = 0; i < p.grad.numel(); ++i) {
      const int64_t g = p.spec.sharding.sharded() ? p.spec.sharding.global_index(i) : i;
      worst = std::max(worst, std::abs(p.grad.f32()[i] - ref.grad.f32()[g]));
    }
    EXPECT_LE(worst, 1e-5f * scale + 1e-9f) << p.spec.name << ": largest difference " << worst << " of " << scale;
  }
}

// Every expert bias this rank holds equals the single process's bit for bit (an update counts whole
// tokens, so any layout that routes alike moves it alike); returns how many elements have moved.
int expect_expert_biases_match(Trainer& t, Trainer& single) {
  int moved = 0;
  for (const model::Parameter& p : t.parameters().params()) {
    if (p.spec.trained()) continue;
    const model::Parameter& ref = single.parameters().get(p.spec.name);
    EXPECT_EQ(p.value.numel(), ref.value.numel()) << p.spec.name;
    for (int64_t i = 0; i < std::min(p.value.numel(), ref.value.numel()); ++i) {
      EXPECT_EQ(p.value.f32()[i], ref.value.f32()[i]) << p.spec.name << "[" << i << "]";
      moved += ref.value.f32()[i] != 0.0f;
    }
  }
  return moved;
}

std::vector<Layout> layouts_for(int world) {
  const std::string capacity = "--moe-expert-capacity-factor 1.0";
  const std::string padded = "--moe-expert-capacity-factor 1.5 --moe-pad-expert-input-to-capacity";
  const std::vector<Layout> all{
      {1, 1, 1, 1, 1, 2, "", ""},
      {1, 1, 2, 1, 1, 2, "", ""},
      {1, 1, 2, 1, 1, 2, capacity, "--moe-token-dispatcher-type allgather --moe-grouped-gemm"},
      {1, 1, 1, 2, 1, 2, "--swiglu --moe-shared-expert-intermediate-size 16", ""},
      {1, 1, 2, 2, 1, 2, capacity, ""},
      {1, 1, 4, 1, 1, 2, "--moe-router-load-balancing-type seq_aux_loss", "--use-distributed-optimizer"},
      {2, 1, 2, 1, 1, 2, "", "--sequence-parallel"},
      {2, 1, 2, 2, 1, 2, "--moe-input-jitter-eps 0.1", "--sequence-parallel --moe-token-dispatcher-type allgather --moe-grouped-gemm"},
      {1, 2, 2, 1, 1, 4, padded, ""},
      {1, 2, 2, 2, 2, 4, "--swiglu", "--use-distributed-optimizer --moe-grouped-gemm"},
      {2, 2, 2, 1, 1, 4, "--mlp-type residual", "--sequence-parallel --use-distributed-optimizer"},
      {2, 2, 4, 1, 2, 4, "", "--sequence-parallel"},
      {1, 2, 4, 1, 1, 4, padded, "--moe-token-dispatcher-type allgather --moe-grouped-gemm"},
      {1, 1, 2, 1, 1, 2, kDeepSeekRouting, ""},
      {2, 1, 2, 1, 1, 2, kDeepSeekRouting, "--sequence-parallel --moe-token-dispatcher-type allgather"},
      {1, 1, 4, 1, 1, 2, kDeepSeekRouting, "--use-distributed-optimizer"},
      {1, 2, 2, 1, 1, 4, kDeepSeekRouting + " --moe-expert-capacity-factor 1.0", "--use-distributed-optimizer"},
      // Zero bubble: the grouped experts' weight gradients deferred to W, the router's kept in B.
      {1, 2, 2, 1, 1, 4, "", "--enable-zero-bubble --moe-grouped-gemm"},
      {2, 2, 2, 1, 1, 4, "--swiglu", "--zero-bubble-v-schedule --sequence-parallel --use-distributed-optimizer"},
      {1, 1, 2, 1, 1, 2, kDeepSeekRouting + kMtp, ""},
      {2, 1, 2, 1, 1, 2, kDeepSeekRouting + kMtp, "--sequence-parallel"},
      {1, 2, 2, 1, 1, 4, kMtp, "--use-distributed-optimizer"},
      // Dense layers only on the last stage: it joins the expert gradients' norm with nothing of its own.
      {1, 2, 2, 1, 1, 4, "--moe-layer-freq [1,1,0,0]", "--use-distributed-optimizer"},
  };
  std::vector<Layout> out;
  for (const Layout& l : all)
    if (world % (l.tp * l.pp) == 0 && world % (l.ep * l.etp * l.pp) == 0 && l.ep * l.etp * l.tp > 1 &&
        (l.extra.find("zero-bubble") == std::string::npos || world == 4))  // zero bubble: at 4 ranks only
      out.push_back(l);
  if (world == 2) out.push_back({1, 1, 1, 1, 1, 2, capacity, ""});  // data parallelism alone
  if (world == 2) out.push_back({1, 1, 1, 1, 1, 2, kDeepSeekRouting, ""});
  return out;
}

TEST(MoeLayouts, LossesAndGradientsMatchTheSingleProcessRun) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  const std::vector<Layout> layouts = layouts_for(n);
  if (layouts.empty()) GTEST_SKIP() << "no expert-parallel layout fits " << n << " rank(s)";
  for (const Layout& l : layouts) {
    const int dp = n / (l.tp * l.pp);
    const int64_t global_batch = static_cast<int64_t>(l.m) * dp;
    SCOPED_TRACE(str_cat("tp=", l.tp, " pp=", l.pp, " ep=", l.ep, " etp=", l.etp, " v=", l.v, " dp=", dp, " ",
                         l.model, " ", l.extra));
    const bool bias = l.model.find("--moe-router-enable-expert-bias") != std::string::npos;
    const int iterations = bias ? kBiasIterations : kIterations;
    Trainer t(parse_train_arguments(split_flags(flags(l, global_batch, iterations)), n), world.get());
    t.train();
    Trainer& single = reference(l, global_batch, iterations);
    ASSERT_EQ(t.losses().size(), single.losses().size());
    for (size_t i = 0; i < t.losses().size(); ++i)
      EXPECT_NEAR(t.losses()[i], single.losses()[i], 1e-5 * std::abs(single.losses()[i])) << "iteration " << i + 1;
    ASSERT_EQ(t.auxiliary_losses().size(), single.auxiliary_losses().size());
    for (const auto& [name, values] : single.auxiliary_losses()) {
      const std::vector<double>& got = t.auxiliary_losses().at(name);
      ASSERT_EQ(got.size(), values.size()) << name;
      for (size_t i = 0; i < values.size(); ++i)
        EXPECT_NEAR(got[i], values[i], 1e-5 * std::abs(values[i]) + 1e-7) << name << " iteration " << i + 1;
    }
    if (bias) {
      EXPECT_GT(expect_expert_biases_match(t, single), 0) << "the expert bias never moved";
    }
    // The distributed optimizer keeps only its own shard of each reduced gradient: its layouts are
    // checked by the losses, which its updates produce.
    if (l.extra.find("--use-distributed-optimizer") != std::string::npos) continue;
    Trainer one(parse_train_arguments(split_flags(flags(l, global_batch, 1)), n), world.get());
    one.train();
    expect_gradients_match(one, reference(l, global_batch, 1));
  }
}

// A run with the expert bias saved at an expert-parallel layout and resumed at a data-parallel one
// continues exactly as the uninterrupted run there: the bias is in the checkpoint and resharded.
TEST(MoeExpertBias, ResumedRunContinuesWithTheSavedBias) {
  namespace fs = std::filesystem;
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  const Layout saved{1, 1, n % 2 == 0 ? 2 : 1, 1, 1, 2, kDeepSeekRouting, ""};
  const Layout resumed{1, 1, 1, 1, 1, 2, kDeepSeekRouting, ""};
  const int64_t global_batch = 2 * n;
  const fs::path dir = testing::shared_scratch_dir(*world, str_cat("tessera_moe_bias_resume_np", n));
  Trainer whole(parse_train_arguments(split_flags(flags(resumed, global_batch, kBiasIterations)), n), world.get());
  whole.train();
  if (world->rank() == 0) fs::remove_all(dir);
  world->barrier();
  {
    Trainer first(parse_train_arguments(split_flags(flags(saved, global_batch, 3) + " --save " + dir.string()), n),
                  world.get());
    first.train();
  }
  Trainer second(
      parse_train_arguments(split_flags(flags(resumed, global_batch, kBiasIterations) + " --load " + dir.string()), n),
      world.get());
  EXPECT_EQ(second.iteration(), 3);
  second.train();
  ASSERT_EQ(second.losses().size(), static_cast<size_t>(kBiasIterations - 3));
  for (size_t i = 0; i < second.losses().size(); ++i)
    EXPECT_NEAR(second.losses()[i], whole.losses()[3 + i], 1e-5 * std::abs(whole.losses()[3 + i]))
        << "iteration " << 4 + i;
  EXPECT_GT(expect_expert_biases_match(second, whole), 0) << "the expert bias never moved";
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::train
