// Expert parallelism (ep experts-per-rank splits, etp splits of each expert, both dispatchers) combined
// with tensor, sequence, pipeline (1F1B and interleaved) and data parallelism and the distributed
// optimizer reproduces the single-process run of the same mixture-of-experts model: the losses of several
// iterations (the LM loss and the logged auxiliary losses) and every gradient of the first step,
// dropless and with a capacity, with the local experts one by one and grouped (--moe-grouped-gemm).
#include <gtest/gtest.h>

#include <cmath>
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
  };
  std::vector<Layout> out;
  for (const Layout& l : all)
    if (world % (l.tp * l.pp) == 0 && world % (l.ep * l.etp * l.pp) == 0 && l.ep * l.etp * l.tp > 1) out.push_back(l);
  if (world == 2) out.push_back({1, 1, 1, 1, 1, 2, capacity, ""});  // data parallelism alone
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
    Trainer t(parse_train_arguments(split_flags(flags(l, global_batch, kIterations)), n), world.get());
    t.train();
    Trainer& single = reference(l, global_batch, kIterations);
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
    // The distributed optimizer keeps only its own shard of each reduced gradient: its layouts are
    // checked by the losses, which its updates produce.
    if (l.extra.find("--use-distributed-optimizer") != std::string::npos) continue;
    Trainer one(parse_train_arguments(split_flags(flags(l, global_batch, 1)), n), world.get());
    one.train();
    expect_gradients_match(one, reference(l, global_batch, 1));
  }
}

}  // namespace
}  // namespace tessera::train
