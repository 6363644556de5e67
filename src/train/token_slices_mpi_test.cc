// TeraPipe across pipeline stages (--pipeline-token-slices with --pipeline-model-parallel-size > 1): each
// micro-batch's token slices flow through the stages one after another, 1F1B over the slices, with dropout
// on. Equal and uneven slicings at pp 2 and pp 4, GPT-2 and Llama style (RoPE, grouped-query attention),
// also with tensor parallelism (with and without sequence parallelism), data parallelism (distributed
// optimizer, overlapped reduction) and recomputation, and `auto` (TeraPipe's dynamic program over a given
// cost) give the single-process unsliced run's losses and every gradient, to 1e-5 relative; so does
// Multi-Latent Attention (with and without --q-lora-rank, at pp 2 and at tp 2 x pp 2). Multi-token
// prediction (issue 53: its modules run over the whole sequence after the last slice, their gradient split
// back into the slices' backward) gives the same mtp_k losses too, with 1 and 2 modules at pp 2 and at
// tp 2 x pp 2 with and without sequence parallelism, and under MLA.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "comm/mpi_test_main.h"
#include "pipeline/token_slicing_search.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

using testing::split_flags;

struct Layout {
  int tp, pp, dp, m;   // m: micro-batches per data-parallel replica
  std::string slices;  // --pipeline-token-slices
  std::string extra;   // flags of the layout only
  std::string model;   // flags of the model, given to the single-process run too
};

// Llama-style: rotary positions (keyed by the slice's global positions), grouped-query attention with
// its smaller caches, SwiGLU, RMSNorm, untied output layer.
const char* kLlama = "--position-embedding-type rope --normalization RMSNorm --swiglu --group-query-attention "
                     "--num-query-groups 2 --disable-bias-linear --untie-embeddings-and-output-weights";

// DeepSeek-V3's Multi-Latent Attention (issue 53): keys and values of 10 and 12 columns from one latent,
// YaRN RoPE at the slices' global positions, each head's key and value cached for the later slices.
const char* kMla =
    "--position-embedding-type rope --normalization RMSNorm --disable-bias-linear --multi-latent-attention "
    "--kv-lora-rank 8 --qk-head-dim 6 --qk-pos-emb-head-dim 4 --v-head-dim 12 --qk-layernorm "
    "--rotary-scaling-factor 4 --mscale 0.8 --mscale-all-dim 0.5 --yarn-original-max-position-embeddings 8";
const std::string kMlaQ = str_cat(kMla, " --q-lora-rank 12");

// DeepSeek-V3's multi-token prediction (issue 53) with 1 and 2 modules: RoPE, as the last stage looks tokens up
// in the output layer's tied copy of the word embedding.
const char* kMtp1 = "--mtp-num-layers 1 --position-embedding-type rope --normalization RMSNorm";
const char* kMtp2 = "--mtp-num-layers 2 --mtp-loss-scaling-factor 0.3 --position-embedding-type rope";
const std::string kMlaMtp = str_cat(kMla, " --mtp-num-layers 2");

// 4 layers (1 per stage at pp 4), sequence 16, micro-batches of 2, dropout on; the padded vocabulary is 64
// at every tp, so every layout trains one model.
std::string flags(int tp, int pp, int64_t global_batch, int iters, const std::string& extra) {
  return str_cat("--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data "
                 "--tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --lr 3e-3 --log-interval 100 "
                 "--eval-iters 0 --hidden-dropout 0.1 --attention-dropout 0.1 --global-batch-size ", global_batch,
                 " --train-iters ", iters, " --make-vocab-size-divisible-by ", 64 / tp,
                 " --tensor-model-parallel-size ", tp, " --pipeline-model-parallel-size ", pp, " ", extra);
}

// The single-process unsliced run of a model, computed once per process.
Trainer& reference(int64_t global_batch, int iters, const std::string& model) {
  static std::map<std::string, std::unique_ptr<Trainer>> cache;
  auto& t = cache[str_cat(global_batch, "/", iters, "/", model)];
  if (!t) {
    t = std::make_unique<Trainer>(parse_train_arguments(split_flags(flags(1, 1, global_batch, iters, model))));
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
    EXPECT_LE(worst, 1e-5f * scale + 1e-9f) << p.spec.name << " element " << worst_at << " of " << p.grad.numel();
  }
}

// The layouts that use exactly `world` ranks: each world size runs its own few.
std::vector<Layout> layouts_for(int world) {
  const std::vector<Layout> all{
      {1, 2, 1, 3, "4", "", ""},
      {1, 2, 1, 2, "3,5,8", "--recompute-activations", kLlama},
      {1, 4, 1, 3, "2,6,8", "", ""},
      {2, 2, 1, 2, "4", "--sequence-parallel", ""},
      {2, 2, 1, 2, "6,10", "", kLlama},
      {1, 2, 2, 2, "5,11", "--use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 2000", ""},
      {2, 4, 1, 2, "4,4,8", "--sequence-parallel", ""},
      {2, 2, 2, 2, "8,8", "--recompute-granularity full --recompute-method uniform", "--untie-embeddings-and-output-weights"},
      {1, 4, 1, 2, "auto", "", ""},
      {2, 2, 2, 2, "auto", "--sequence-parallel", ""},
      {1, 2, 1, 2, "3,5,8", "", kMla},
      {1, 2, 1, 3, "4", "", kMlaQ},
      {2, 2, 1, 2, "4", "--sequence-parallel", kMlaQ},  // each tensor rank's heads cached
      {2, 2, 1, 2, "6,10", "", kMla},
      {1, 2, 1, 3, "4", "", kMtp1},
      {1, 2, 1, 2, "3,5,8", "--recompute-activations", kMtp2},
      {2, 2, 1, 2, "4", "--sequence-parallel", kMtp2},
      {2, 2, 1, 2, "6,10", "", kMtp1},
      {1, 2, 1, 2, "5,11", "", kMlaMtp},
  };
  std::vector<Layout> out;
  for (const Layout& l : all)
    if (l.tp * l.pp * l.dp == world) out.push_back(l);
  return out;
}

// For `auto`: a cost with a small fixed part per slice, so that TeraPipe's dynamic program cuts the 16
// tokens into two slices of 8 (the stated model keeps so short a sequence whole).
TokenSliceCosts cheap_slices(const TrainArguments&) {
  return {[](int64_t length, int64_t context) { return 1e-4 + 1e-4 * length + 1e-6 * length * context; }, "the test"};
}

TrainArguments arguments(const Layout& l, int64_t global_batch, int iters, const std::string& extra, int world) {
  return parse_train_arguments(split_flags(flags(l.tp, l.pp, global_batch, iters, extra)), world, cheap_slices);
}

TEST(TokenSlicesAcrossStages, LossesAndGradientsMatchTheSingleProcessUnslicedRun) {
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  std::vector<Layout> layouts = layouts_for(n);
  if (layouts.empty()) GTEST_SKIP() << "token slices across pipeline stages need 2, 4 or 8 ranks, not " << n;
  for (const Layout& l : layouts) {
    const int64_t global_batch = static_cast<int64_t>(l.m) * 2 * l.dp;
    const std::string extra = str_cat("--pipeline-token-slices ", l.slices, " ", l.extra, " ", l.model);
    SCOPED_TRACE(str_cat("tp=", l.tp, " pp=", l.pp, " dp=", l.dp, " m=", l.m, " ", extra));
    const TrainArguments args = arguments(l, global_batch, 3, extra, n);
    if (l.slices == "auto") {
      EXPECT_EQ(args.token_slices, (std::vector<int64_t>{8, 8}));
      EXPECT_EQ(args.token_slices,
                pipeline::best_token_slicing(16, 8, cheap_slices(args).cost, l.m, static_cast<int>(l.pp)));
    }
    Trainer t(args, world.get());
    t.train();
    Trainer& ref = reference(global_batch, 3, l.model);
    ASSERT_EQ(t.losses().size(), ref.losses().size());
    for (size_t i = 0; i < t.losses().size(); ++i)
      EXPECT_NEAR(t.losses()[i], ref.losses()[i], 1e-5 * std::abs(ref.losses()[i])) << "iteration " << i + 1;
    ASSERT_EQ(t.auxiliary_losses().size(), ref.auxiliary_losses().size());
    for (const auto& [name, values] : ref.auxiliary_losses()) {  // MTP's mtp_<k> loss
      const std::vector<double>& got = t.auxiliary_losses().at(name);
      ASSERT_EQ(got.size(), values.size()) << name;
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], values[i], 1e-5 * std::abs(values[i])) << name << " iteration " << i + 1;
    }

    // Gradients of one step from the initial weights. The distributed optimizer leaves each data-parallel
    // rank only its shard of the reduced gradient, so this step all-reduces them whole instead.
    std::string grad_extra = extra;
    if (size_t at = grad_extra.find("--use-distributed-optimizer"); at != std::string::npos)
      grad_extra.erase(at, std::string("--use-distributed-optimizer").size());
    Trainer one(arguments(l, global_batch, 1, grad_extra, n), world.get());
    one.train();
    expect_gradients_match(one, reference(global_batch, 1, l.model));
  }
}

TEST(TokenSlicesAcrossStages, InterleavedStagesAreRefusedNamingTheFlag) {
  try {
    parse_train_arguments(split_flags(flags(1, 2, 4, 1, "--pipeline-token-slices 4 "
                                                        "--num-virtual-stages-per-pipeline-rank 2")),
                          2);
    ADD_FAILURE() << "token slices with the interleaved schedule accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--pipeline-token-slices=4: cannot be combined with the interleaved "
                                         "schedule (--num-virtual-stages-per-pipeline-rank 2)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::train
