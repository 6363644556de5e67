// Ouroboros (issue 38, docs/ouroboros.md) under data parallelism: K = 3 modules on 2 pipeline ranks
// replicated over 2 data-parallel ranks (and split over 2 tensor ranks at 8) equals the one-process
// emulation over the whole global batch bit for bit, the emulation adding its two shares' gradients as
// the two replicas add theirs (OuroborosOptions::data_shares), with and without multi-token prediction
// (its mtp_k losses carried across the ring and the replicas). And checkpoints on the ring: a run saved
// with delayed state pending and resumed equals the uninterrupted one bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "comm/mpi_test_main.h"
#include "train/ouroboros_engine.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

using testing::split_flags;

// One layer per module, dropout on, the gradient clipped (the norm's order matters), one synchronous
// iteration first; 2 micro-batches per replica.
constexpr double kClip = 0.05;
std::string flags(int pp, int tp, int K, int64_t global_batch, int iters) {
  return str_cat("--num-layers ", K, " --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data "
                 "--tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 1 --global-batch-size ",
                 global_batch, " --lr 3e-3 --lr-warmup-iters 2 --lr-decay-iters 20 --lr-decay-style cosine "
                 "--log-interval 100 --eval-iters 1 --eval-interval 100 --hidden-dropout 0.1 --attention-dropout 0.1 "
                 "--clip-grad ", kClip, " --train-iters ", iters, " --pipeline-schedule ouroboros --ouroboros-modules ", K,
                 " --ouroboros-warmup-iters 1 --pipeline-model-parallel-size ", pp, " --tensor-model-parallel-size ", tp,
                 " --make-vocab-size-divisible-by ", 64 / tp);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.f32(), b.f32(), a.numel() * sizeof(float)) == 0;
}

// Every iteration's loss, the last gradient norm and every module's weights on its rank equal the
// emulation's. A replica whose gradients were not added in (or added in another order, or to the
// wrong module) trains other weights.
TEST(Ouroboros, DataParallelRunEqualsTheOneProcessEmulationBitForBit) {
  auto world = comm::make_mpi_world_group();
  const int P = 2, K = 3, D = 2, iters = 5;
  const int T = world->size() == 8 ? 2 : 1;
  if (world->size() != 4 && world->size() != 8) GTEST_SKIP() << "K = 3 with dp 2 runs on 4 ranks, with tp 2 on 8";
  const int n = P * T * D;
  SCOPED_TRACE(str_cat("K=", K, " on ", P, " pipeline x ", T, " tensor x ", D, " data-parallel ranks"));
  Trainer run(parse_train_arguments(split_flags(flags(P, T, K, 2 * D, iters)), n), world.get());
  run.train();
  // The emulation on the T ranks of this rank's tensor group (tensor ranks first in the layout), over the
  // whole global batch in two shares.
  std::unique_ptr<comm::ProcessGroup> tensor = world->split(world->rank() / T, world->rank(), "emulation");
  TrainArguments emulated = parse_train_arguments(split_flags(flags(1, T, K, 2 * D, iters)), T);
  emulated.ouroboros_emulated_replicas = D;
  Trainer emulation(emulated, tensor.get());
  emulation.train();
  ASSERT_EQ(run.losses().size(), static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) EXPECT_EQ(run.losses()[i], emulation.losses()[i]) << "iteration " << i + 1;
  OuroborosDriver& got = *ouroboros_driver(run.engine());
  OuroborosDriver& want = *ouroboros_driver(emulation.engine());
  EXPECT_EQ(got.last_grad_norm(), want.last_grad_norm());
  EXPECT_GT(got.last_grad_norm(), kClip) << "the clipping must be on for the norm's order to be checked";
  int held = 0;
  for (int k = 0; k < K; ++k) {
    if (!got.holds(k)) continue;
    ++held;
    for (const model::Parameter& p : got.parameters(k).params())
      EXPECT_TRUE(same_bits(p.value, want.parameters(k).get(p.spec.name).value)) << "module " << k << " " << p.spec.name;
  }
  EXPECT_GT(held, 0);
  // The evaluation sums its replicas' losses in fp32 (as 1F1B's does): near, not bitwise.
  const double got_eval = run.evaluate().lm_loss, want_eval = emulation.evaluate().lm_loss;
  EXPECT_NEAR(got_eval, want_eval, 1e-6 * want_eval);
}

// DeepSeek-V3's multi-token prediction (issue 53): `depth` modules on module K-1 (rank 0, after the
// output layer), on the ring of 2 pipeline ranks (x 2 data-parallel at 4, x 2 tensor at 8), with RoPE
// and with learned absolute positions (module K-1's copy of the position embedding tied to module 0's).
// Every iteration's LM and mtp_k losses, the last gradient norm, and every module's last gradients and
// weights equal the one-process emulation's over the whole global batch. A ring that dropped the mtp_k
// losses of rank 0, or summed the replicas' in another order, logs others; one that lost the modules'
// gradient (or its lookups of the tied embeddings) trains other weights.
TEST(Ouroboros, MultiTokenPredictionOnTheRingEqualsTheOneProcessEmulationBitForBit) {
  auto world = comm::make_mpi_world_group();
  if (world->size() != 2 && world->size() != 4 && world->size() != 8)
    GTEST_SKIP() << "K = 3 runs on 2 ranks, with dp 2 on 4, with tp 2 dp 2 on 8";
  const int P = 2, K = 3, T = world->size() == 8 ? 2 : 1, D = world->size() / (P * T), iters = 4;
  const int n = world->size();
  // Two modules where it is cheap (no tensor split); learned positions with one.
  std::vector<std::pair<int, std::string>> cases = {{1, "rope"}, {1, "learned_absolute"}};
  if (T == 1) cases.emplace_back(2, "rope");
  for (const auto& [depth, positions] : cases) {
    SCOPED_TRACE(str_cat("MTP ", depth, " with ", positions, " positions on ", P, " pipeline x ", T, " tensor x ",
                         D, " data-parallel ranks"));
    const std::string mtp = str_cat(" --position-embedding-type ", positions, " --mtp-num-layers ", depth,
                                    " --mtp-loss-scaling-factor 0.3");
    Trainer run(parse_train_arguments(split_flags(flags(P, T, K, 2 * D, iters) + mtp), n), world.get());
    run.train();
    std::unique_ptr<comm::ProcessGroup> tensor = world->split(world->rank() / T, world->rank(), "emulation");
    TrainArguments emulated = parse_train_arguments(split_flags(flags(1, T, K, 2 * D, iters) + mtp), T);
    emulated.ouroboros_emulated_replicas = D;
    Trainer emulation(emulated, tensor.get());
    emulation.train();
    ASSERT_EQ(run.losses().size(), static_cast<size_t>(iters));
    EXPECT_EQ(run.losses(), emulation.losses());
    for (int k = 1; k <= depth; ++k) {
      const std::string name = str_cat("mtp_", k, " loss");
      ASSERT_EQ(run.auxiliary_losses().count(name), 1u) << name;
      const std::vector<double>& got = run.auxiliary_losses().at(name);
      ASSERT_EQ(got.size(), static_cast<size_t>(iters)) << name;
      EXPECT_EQ(got, emulation.auxiliary_losses().at(name)) << name;
      for (double v : got) EXPECT_GT(v, 0) << name;
    }
    OuroborosDriver& mine = *ouroboros_driver(run.engine());
    OuroborosDriver& want = *ouroboros_driver(emulation.engine());
    EXPECT_EQ(mine.last_grad_norm(), want.last_grad_norm());
    int mtp_params = 0;
    for (int k = 0; k < K; ++k) {
      if (!mine.holds(k)) continue;
      for (const model::Parameter& p : mine.parameters(k).params()) {
        const model::Parameter& q = want.parameters(k).get(p.spec.name);
        // (Module K-1's copies of V and P hold no gradient of their own: theirs are the driver's
        // accumulators, below.)
        if (!p.spec.tied_copy) {
          EXPECT_TRUE(same_bits(p.grad, q.grad)) << "module " << k << " " << p.spec.name << " gradient";
        }
        EXPECT_TRUE(same_bits(p.value, q.value)) << "module " << k << " " << p.spec.name;
        if (p.spec.name.rfind("mtp.", 0) == 0) ++mtp_params;
      }
    }
    // V's gradient: the output layer's and the modules' fresh lookups plus the input embedding's stale
    // term; with learned positions P's: the modules' fresh lookups plus the input embedding's stale term.
    if (mine.holds(0)) {
      const std::vector<std::string> tied = mine.tied_names();
      EXPECT_EQ(tied.size(), positions == "rope" ? 1u : 2u);
      EXPECT_EQ(tied, want.tied_names());
      for (const std::string& name : tied)
        EXPECT_TRUE(same_bits(mine.tied_gradient(name), want.tied_gradient(name))) << name;
      // Module K-1's copies stay equal to module 0's.
      for (const std::string& name : tied)
        EXPECT_TRUE(same_bits(mine.parameters(0).get(name).value, mine.parameters(K - 1).get(name).value)) << name;
    }
    // Rank 0 of the ring holds module K-1 and with it the modules.
    EXPECT_EQ(mtp_params > 0, mine.holds(K - 1));
    // The evaluation sums the ranks' losses in fp32 (as 1F1B's does): near, not bitwise.
    const Evaluation got_eval = run.evaluate(), want_eval = emulation.evaluate();
    ASSERT_EQ(got_eval.auxiliary.size(), static_cast<size_t>(depth));
    for (int k = 0; k < depth; ++k) {
      EXPECT_EQ(got_eval.auxiliary[k].first, want_eval.auxiliary[k].first);
      EXPECT_NEAR(got_eval.auxiliary[k].second, want_eval.auxiliary[k].second, 1e-6 * want_eval.auxiliary[k].second);
    }
  }
}

// K = 3 on 2 ranks (on 2 pipeline x 2 data-parallel ranks at 4, x 2 tensor ranks at 8) saved after 3
// iterations, when module 0 (pipeline rank 0) waits for the error gradient of mini-batch 1 from pipeline
// rank 1 and both hold activation records whose backward is to come, resumed for 3 more: every loss
// and every module's weights equal the uninterrupted run's.
TEST(Ouroboros, ResumedRunOnTheRingEqualsTheUninterruptedOneBitForBit) {
  auto world = comm::make_mpi_world_group();
  if (world->size() != 2 && world->size() != 4 && world->size() != 8)
    GTEST_SKIP() << "K = 3 runs on 2 ranks, with dp 2 on 4, with tp 2 dp 2 on 8";
  const int P = 2, K = 3, T = world->size() == 8 ? 2 : 1, D = world->size() / (P * T), save_at = 3, iters = 6;
  namespace fs = std::filesystem;
  const fs::path dir = testing::shared_scratch_dir(*world, str_cat("tessera_ouroboros_resume_np", world->size()));
  if (world->rank() == 0) fs::remove_all(dir);
  world->barrier();
  const int n = world->size();
  Trainer full(parse_train_arguments(split_flags(flags(P, T, K, 2 * D, iters)), n), world.get());
  full.train();
  {
    Trainer first(parse_train_arguments(split_flags(flags(P, T, K, 2 * D, save_at) + " --save " + dir.string()), n),
                  world.get());
    first.train();
    // World rank = tensor rank + T * (data rank + D * pipeline rank).
    EXPECT_GT(ouroboros_driver(first.engine())->held_records(world->rank() / (T * D) == 0 ? 0 : 1), 0);
  }
  Trainer second(parse_train_arguments(split_flags(flags(P, T, K, 2 * D, iters) + " --load " + dir.string()), n),
                 world.get());
  EXPECT_EQ(second.iteration(), save_at);
  second.train();
  ASSERT_EQ(second.losses().size(), static_cast<size_t>(iters - save_at));
  for (int i = save_at; i < iters; ++i) EXPECT_EQ(second.losses()[i - save_at], full.losses()[i]) << "iteration " << i + 1;
  OuroborosDriver& resumed = *ouroboros_driver(second.engine());
  OuroborosDriver& uninterrupted = *ouroboros_driver(full.engine());
  for (int k = 0; k < K; ++k) {
    if (!resumed.holds(k)) continue;
    for (const model::Parameter& p : resumed.parameters(k).params())
      EXPECT_TRUE(same_bits(p.value, uninterrupted.parameters(k).get(p.spec.name).value))
          << "module " << k << " " << p.spec.name;
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::train
