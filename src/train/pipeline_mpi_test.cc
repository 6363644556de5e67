// Pipeline parallelism (1F1B, interleaved, ZB-H1 and ZB-V), alone and combined with tensor, sequence and data
// parallelism and with activation recomputation, reproduces the single-process run without
// recomputation: the losses of 10 iterations and every gradient. Ouroboros on P ranks (issue 38) equals
// its one-process emulation bit for bit. Multi-Latent Attention (issue 53) at tp 2 x pp 2 too, and
// multi-token prediction (issue 53: its modules on the last model chunk, its losses compared as well) at pp 2
// with tp and sp, with data parallelism under the distributed optimizer, interleaved, ZB-H1 and ZB-V; with
// untied embeddings and with learned absolute positions at pp 2, pp 4 and tp 2 x pp 2 (the last stage's
// copies of the word and position embeddings, their gradients compared too), and its pp 2 checkpoint,
// which holds one copy of each, resumed in one process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "ckpt/checkpoint.h"
#include "comm/mpi_test_main.h"
#include "train/ouroboros_engine.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

struct Layout {
  int tp, pp, v, m;  // m: micro-batches per data-parallel replica
  std::string extra;
  std::string model = "";  // model flags, which the single-process reference runs with too
};

// Multi-Latent Attention (issue 53): DeepSeek-V3's form (compressed query, latent norms, YaRN with the
// softmax's mscale, a short original context so that the ramp divides some frequencies) and V2-Lite's.
const std::string kMlaV3 =
    "--multi-latent-attention --q-lora-rank 12 --kv-lora-rank 8 --qk-head-dim 6 --qk-pos-emb-head-dim 4 "
    "--v-head-dim 10 --qk-layernorm --normalization RMSNorm --rope-type yarn --rotary-scaling-factor 4 "
    "--mscale 0.8 --mscale-all-dim 0.5 --yarn-original-max-position-embeddings 8";
const std::string kMlaV2Lite =
    "--multi-latent-attention --kv-lora-rank 8 --qk-head-dim 6 --qk-pos-emb-head-dim 4 --v-head-dim 6 "
    "--rope-type rope";

// Multi-token prediction (DeepSeek-V3's MTP, two modules) on a RoPE model (the last stage looks tokens up in
// the output layer's tied copy of the word embedding).
const std::string kMtp =
    "--mtp-num-layers 2 --mtp-loss-scaling-factor 0.3 --position-embedding-type rope --normalization RMSNorm";

// One module under --untie-embeddings-and-output-weights (the last stage's own copy of the word embedding),
// and with learned absolute positions, tied and untied (its copy of the position embedding too).
const std::string kMtpUntied =
    "--mtp-num-layers 1 --mtp-loss-scaling-factor 0.3 --position-embedding-type rope "
    "--untie-embeddings-and-output-weights";
const std::string kMtpLearned = "--mtp-num-layers 1 --mtp-loss-scaling-factor 0.3 --position-embedding-type learned_absolute";
const std::string kMtpLearnedUntied = kMtpLearned + " --untie-embeddings-and-output-weights";

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

// Iterations each layout trains against the reference (10: every schedule's warm-up, steady state and
// cool-down several times over, and the updates carry any gradient error into the later losses).
constexpr int kIters = 10;

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
      // Zero bubble (pipeline/zero_bubble.h): B and W split, ZB-H1 and ZB-V's two chunks per rank in a V.
      {1, 2, 1, 4, "--enable-zero-bubble"},
      {1, 2, 1, 3, "--zero-bubble-v-schedule --untie-embeddings-and-output-weights"},
      {1, 4, 1, 6, "--zero-bubble-v-schedule --recompute-granularity full --recompute-method uniform "
                   "--recompute-num-layers 1"},
      {2, 2, 1, 3, "--enable-zero-bubble --zero-bubble-max-pending-backward 1 --sequence-parallel "
                   "--overlap-grad-reduce --ddp-bucket-size 2000"},
      {2, 2, 1, 4, "--zero-bubble-v-schedule --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce "
                   "--ddp-bucket-size 1500"},
      {2, 2, 1, 4, "--sequence-parallel --recompute-granularity full --recompute-method uniform", kMlaV3},
      {2, 2, 1, 2, "", kMlaV2Lite},
      {1, 2, 1, 4, "--use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 3000", kMtp},
      {2, 2, 1, 4, "--sequence-parallel", kMtp},
      {1, 2, 2, 4, "--recompute-granularity full --recompute-method uniform", kMtp},  // on the last model chunk
      {1, 2, 1, 4, "--enable-zero-bubble", kMtp},     // the modules' weight gradients in W
      {1, 2, 1, 3, "--zero-bubble-v-schedule", kMtp},  // the last chunk on rank 0, beside the embedding
      // The last stage's copies of the first stage's embeddings (issue 53).
      {1, 2, 1, 4, "", kMtpUntied},
      {1, 4, 1, 4, "", kMtpUntied},
      {2, 2, 1, 4, "--sequence-parallel", kMtpUntied},
      {1, 2, 1, 4, "", kMtpLearned},
      {1, 4, 1, 4, "", kMtpLearned},
      {2, 2, 1, 4, "--sequence-parallel", kMtpLearnedUntied},
      {1, 2, 1, 4, "--use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 3000", kMtpLearnedUntied},
      {1, 2, 1, 3, "--zero-bubble-v-schedule", kMtpLearnedUntied},  // no copies: rank 0 holds both ends
  };
  std::vector<Layout> out;
  for (const Layout& l : all)
    // MLA's layouts at 4 ranks only (gpt_model_mpi_test has MLA with data parallelism at every size); MTP's
    // at 2 and 4 (pp 2 with dp 2 under the distributed optimizer, tp 2 x pp 2), its interleaved and
    // zero-bubble ones at 2 only; at 8 ranks the layouts of 4 or 8 model ranks, those of 2 having run with
    // data parallelism at 4 (CI time).
    // The embeddings' copies: at their own model size, and under the distributed optimizer with dp 2.
    if (world % (l.tp * l.pp) == 0 && (world < 8 || l.tp * l.pp >= 4) &&
        (l.model.empty() || world == l.tp * l.pp ||
         (l.model == kMtpLearnedUntied && world == 2 * l.tp * l.pp &&
          l.extra.find("--use-distributed-optimizer") != std::string::npos) ||
         (l.model == kMtp && (world == 2 || (world == 4 && l.v == 1 && l.extra.find("zero-bubble") == std::string::npos)))))
      out.push_back(l);
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
    model_flags += " " + l.model;
    const std::string extra = l.extra + " " + l.model;
    SCOPED_TRACE(str_cat("tp=", l.tp, " pp=", l.pp, " v=", l.v, " dp=", dp, " m=", l.m, " ", extra));
    Trainer t(parse_train_arguments(split_flags(flags(l.tp, l.pp, l.v, global_batch, kIters, extra)), n),
              world.get());
    t.train();
    Trainer& single = reference(global_batch, kIters, model_flags);
    ASSERT_EQ(t.losses().size(), single.losses().size());
    for (size_t i = 0; i < t.losses().size(); ++i)
      EXPECT_NEAR(t.losses()[i], single.losses()[i], 1e-5 * std::abs(single.losses()[i])) << "iteration " << i + 1;
    ASSERT_EQ(t.auxiliary_losses().size(), single.auxiliary_losses().size());
    for (const auto& [name, values] : single.auxiliary_losses()) {  // MTP's mtp_<k> loss
      const std::vector<double>& got = t.auxiliary_losses().at(name);
      ASSERT_EQ(got.size(), values.size()) << name;
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], values[i], 1e-5 * std::abs(values[i])) << name << " iteration " << i + 1;
    }

    // Gradients of one step from the initial weights.
    Trainer one(parse_train_arguments(split_flags(flags(l.tp, l.pp, l.v, global_batch, 1, extra)), n),
                world.get());
    one.train();
    // The distributed optimizer leaves each data-parallel rank only its own pieces reduced (the 20
    // losses above check the rest through the updates).
    if (dp == 1 || l.extra.find("--use-distributed-optimizer") == std::string::npos)
      expect_gradients_match(one, reference(global_batch, 1, model_flags));
  }
}

// Multi-token prediction with untied embeddings and learned absolute positions saved at pp 2: the
// checkpoint holds the model's tensors once (the last stage's copies of the word and position embeddings
// are not in it), and resumed in one process it continues as the single-process run (issue 53).
TEST(PipelineLayouts, MtpEmbeddingCopiesAtPp2ResumeInOneProcess) {
  namespace fs = std::filesystem;
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  if (n != 2) GTEST_SKIP() << "pp 2 on 2 ranks, has " << n;
  Trainer& single = reference(4, 6, kMtpLearnedUntied);
  const fs::path dir = testing::shared_scratch_dir(*world, "tessera_mtp_pp_embed");
  if (world->rank() == 0) fs::remove_all(dir);
  world->barrier();
  Trainer parallel(parse_train_arguments(split_flags(flags(1, 2, 1, 4, 3, kMtpLearnedUntied + " --save " +
                                                                             dir.string())),
                                         n),
                   world.get());
  parallel.train();
  world->barrier();
  std::vector<std::string> saved = ckpt::latest_model_tensor_names(dir.string()), want;
  for (const model::Parameter& p : single.parameters().params()) want.push_back(p.spec.name);
  std::sort(saved.begin(), saved.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(saved, want);
  EXPECT_EQ(std::count(saved.begin(), saved.end(), "embedding.word_embeddings.weight"), 1);
  EXPECT_EQ(std::count(saved.begin(), saved.end(), "embedding.position_embeddings.weight"), 1);
  EXPECT_EQ(std::count(saved.begin(), saved.end(), "output_layer.weight"), 1);

  Trainer resumed(parse_train_arguments(split_flags(flags(1, 1, 1, 4, 6, kMtpLearnedUntied + " --load " +
                                                                            dir.string()))));
  EXPECT_EQ(resumed.iteration(), 3);
  resumed.train();
  ASSERT_EQ(resumed.losses().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(resumed.losses()[i], single.losses()[3 + i], 1e-5 * std::abs(single.losses()[3 + i]))
        << "iteration " << 4 + i;
    const double want_mtp = single.auxiliary_losses().at("mtp_1 loss")[3 + i];
    EXPECT_NEAR(resumed.auxiliary_losses().at("mtp_1 loss")[i], want_mtp, 1e-5 * std::abs(want_mtp))
        << "iteration " << 4 + i;
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
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

// --pipeline-schedule ouroboros on P pipeline ranks x T tensor ranks, K = P + 1 modules of one layer,
// dropout on and the gradient clipped (the norm's order matters), one synchronous iteration first.
constexpr double kOuroborosClip = 0.05;
std::string ouroboros_flags(int pp, int tp, int K, int64_t warmup, int iters) {
  return str_cat("--num-layers ", K, " --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data "
                 "--tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 1 --global-batch-size 2 "
                 "--lr 3e-3 --lr-warmup-iters 2 --lr-decay-iters 20 --lr-decay-style cosine --log-interval 100 "
                 "--eval-iters 2 --eval-interval 100 --hidden-dropout 0.1 --attention-dropout 0.1 --clip-grad ", kOuroborosClip,
                 " --train-iters ", iters, " --pipeline-schedule ouroboros --ouroboros-modules ", K,
                 " --ouroboros-warmup-iters ", warmup, " --pipeline-model-parallel-size ", pp,
                 " --tensor-model-parallel-size ", tp, " --make-vocab-size-divisible-by ", 64 / tp);
}

// The losses of every iteration, the gradient norm, every module's final weights and the evaluation
// after training equal the one-process emulation's (on the same tensor ranks), bit for bit: K = 3 on 2 ranks; on 4 ranks K = 4
// on 3 of them (the last one idle), then K = 3 on 2 pipeline x 2 tensor ranks against the emulation on
// 2 tensor ranks. A wrong exchange (an activation or error gradient from the wrong micro-batch,
// mini-batch or iteration) changes the weights of the modules below it and the losses after.
TEST(Ouroboros, RunOnPRanksEqualsTheOneProcessEmulationBitForBit) {
  auto world = comm::make_mpi_world_group();
  struct Case {
    int pp, tp;
  };
  std::vector<Case> cases;
  if (world->size() == 2) cases = {{2, 1}};
  if (world->size() == 4) cases = {{3, 1}, {2, 2}};
  if (cases.empty()) GTEST_SKIP() << "K = 3 runs on 2 ranks, K = 4 and K = 3 with tp 2 on 4";
  const int iters = 5;
  for (const Case& c : cases) {
    const int P = c.pp, T = c.tp, K = P + 1, n = P * T;
    SCOPED_TRACE(str_cat("K=", K, " on ", P, " pipeline x ", T, " tensor ranks"));
    std::unique_ptr<comm::ProcessGroup> ranks = world->split(world->rank() < n ? 0 : -1, world->rank(), "ouroboros");
    if (!ranks) continue;  // the fourth rank of 4 sits K = 4 out
    Trainer run(parse_train_arguments(split_flags(ouroboros_flags(P, T, K, 1, iters)), n), ranks.get());
    run.train();
    // The emulation on the T ranks of this rank's tensor group (tensor ranks come first in the layout:
    // world rank w is tensor rank w % T, as in the run).
    std::unique_ptr<comm::ProcessGroup> tensor = ranks->split(ranks->rank() / T, ranks->rank(), "emulation");
    Trainer emulation(parse_train_arguments(split_flags(ouroboros_flags(1, T, K, 1, iters)), T), tensor.get());
    emulation.train();
    ASSERT_EQ(run.losses().size(), static_cast<size_t>(iters));
    ASSERT_EQ(emulation.losses().size(), static_cast<size_t>(iters));
    for (int i = 0; i < iters; ++i) EXPECT_EQ(run.losses()[i], emulation.losses()[i]) << "iteration " << i + 1;
    OuroborosDriver& got = *ouroboros_driver(run.engine());
    OuroborosDriver& want = *ouroboros_driver(emulation.engine());
    EXPECT_EQ(got.last_grad_norm(), want.last_grad_norm());
    EXPECT_GT(got.last_grad_norm(), kOuroborosClip) << "the clipping must be on for the norm's order to be checked";
    // Module k on pipeline rank k, module K-1 beside module 0.
    const int stage = ranks->rank() / T;
    for (int k = 0; k < K; ++k) EXPECT_EQ(got.holds(k), k == stage || (stage == 0 && k == K - 1)) << "module " << k;
    for (int k = 0; k < K; ++k) {
      if (!got.holds(k)) continue;
      for (const model::Parameter& p : got.parameters(k).params()) {
        const Tensor& w = want.parameters(k).get(p.spec.name).value;
        ASSERT_EQ(w.numel(), p.value.numel());
        EXPECT_EQ(std::memcmp(p.value.f32(), w.f32(), w.numel() * sizeof(float)), 0) << "module " << k << " " << p.spec.name;
      }
      EXPECT_EQ(got.last_backward_batch(k), want.last_backward_batch(k)) << "module " << k;
    }
    // Evaluation (forward only around the ring) equals the emulation's on its whole-model copy.
    const Evaluation got_eval = run.evaluate(), want_eval = emulation.evaluate();
    EXPECT_EQ(got_eval.lm_loss, want_eval.lm_loss);
    EXPECT_GT(want_eval.lm_loss, 0);
    // The check sees the delays: every iteration synchronous trains another sequence.
    Trainer sync(parse_train_arguments(split_flags(ouroboros_flags(1, T, K, iters, iters)), T), tensor.get());
    sync.train();
    EXPECT_NE(sync.losses()[iters - 1], run.losses()[iters - 1]);
  }
}

}  // namespace
}  // namespace tessera::train
