// The single-process Ouroboros emulation against the rule (docs/ouroboros.md): with every delay 0 it is
// plain training bit for bit; after the warm-up each module's gradient is exactly the synchronous
// gradient of the right mini-batch at the right iteration's weights; the tied embedding's gradient is the
// fresh output-layer term plus the stale input-embedding term (and, with multi-token prediction over
// learned positions, the position embedding's: the modules' fresh lookups plus module 0's stale term).
#include "train/ouroboros_driver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/model_factory.h"
#include "model/model_testing.h"

namespace tessera::train {
namespace {

constexpr uint64_t kSeed = 1234;
constexpr int kMicroBatches = 2, kBatch = 2;
constexpr float kLr = 3e-3f;

model::ModelConfig config(int64_t layers) {
  model::ModelConfig c = model::testing::tiny_gpt_config(/*llama_style=*/false, layers, /*seq=*/8, 8);
  c.hidden_size = 32;
  c.kv_channels = 8;
  return c;
}

// DeepSeek-V3's Multi-Latent Attention in every layer (issue 53): query compression, normed latents, YaRN.
model::ModelConfig mla_config(int64_t layers) {
  model::ModelConfig c = config(layers);
  c.position_embedding = model::PositionEmbedding::Rope;
  c.num_query_groups = c.num_attention_heads;
  c.qk_layernorm = true;
  c.mla.enabled = true;
  c.mla.q_lora_rank = 12;
  c.mla.kv_lora_rank = 8;
  c.mla.qk_head_dim = 6;
  c.mla.qk_pos_emb_head_dim = 4;
  c.mla.v_head_dim = 12;
  c.mla.yarn = true;
  c.mla.rotary_scaling_factor = 4;
  c.mla.original_max_position_embeddings = 4;
  return c;
}

// DeepSeek-V3's multi-token prediction (issue 53): `depth` modules after the last layer, on module K-1.
// Learned absolute positions: module K-1 holds a copy of the position embedding P, tied to module 0's.
model::ModelConfig mtp_config(int64_t layers, int64_t depth,
                              model::PositionEmbedding positions = model::PositionEmbedding::Rope) {
  model::ModelConfig c = config(layers);
  c.position_embedding = positions;
  c.mtp_num_layers = depth;
  c.mtp_loss_scaling_factor = 0.3f;
  return c;
}

optim::AdamWConfig adam() {
  optim::AdamWConfig a;
  a.clip_grad = 0;  // the emulation's clipping norm sums per module, plain training's over one buffer
  return a;
}

// Mini-batch t: its micro-batches, each with its own tokens and dropout keys.
std::vector<model::MicroBatch> mini_batch(const model::ModelConfig& c, int64_t t) {
  std::vector<model::MicroBatch> out;
  for (int m = 0; m < kMicroBatches; ++m) {
    out.push_back(model::testing::random_batch(c, kBatch, 100 * t + m));
    out.back().sample_offset = (t * kMicroBatches + m) * kBatch;
  }
  return out;
}

double tokens_of(const std::vector<model::MicroBatch>& batches) {
  double tokens = 0;
  for (const model::MicroBatch& mb : batches)
    for (int64_t i = 0; i < mb.loss_mask.numel(); ++i) tokens += mb.loss_mask.f32()[i];
  return tokens;
}

model::ForwardContext context(const model::ModelConfig& c, int64_t t, const model::MicroBatch& mb, double tokens) {
  model::ForwardContext ctx{kSeed, t + 1, mb.sample_offset, true, c.seq_length, kBatch};
  ctx.per_sample_loss_weight = tokens / (kBatch * kMicroBatches);
  return ctx;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.f32(), b.f32(), a.numel() * sizeof(float)) == 0;
}

// Plain training as the trainer does it on one stage: forward and backward of each micro-batch, AdamW.
// auxiliary: where each iteration's auxiliary loss sums (mtp_k) go, in the chunk's order of names.
std::vector<double> plain_losses(const model::ModelConfig& c, int64_t iters, model::ParameterSet& params,
                                 std::vector<std::vector<double>>* auxiliary = nullptr) {
  std::unique_ptr<model::LanguageModelChunk> chunk = model::build_model_chunk(c, params);
  params.allocate(kSeed);
  optim::AdamWOptimizer opt(params, adam());
  std::vector<double> losses;
  for (int64_t t = 0; t < iters; ++t) {
    std::vector<model::MicroBatch> batches = mini_batch(c, t);
    const double tokens = tokens_of(batches);
    params.zero_grad();
    model::LossSums sums;
    for (const model::MicroBatch& mb : batches) {
      std::unique_ptr<model::ChunkRecord> rec = chunk->make_record();
      chunk->forward(mb, Tensor(), context(c, t, mb, tokens), *rec, sums);
      chunk->backward(*rec, Tensor(), context(c, t, mb, tokens), static_cast<float>(1.0 / tokens));
    }
    opt.step(kLr);
    losses.push_back(sums.lm / tokens);
    if (auxiliary) {
      auxiliary->emplace_back();
      for (const std::string& name : chunk->auxiliary_loss_names())
        for (const auto& [n, v] : sums.auxiliary)
          if (n == name) auxiliary->back().push_back(v);
    }
  }
  return losses;
}

// The driver's step over mini-batch t, whose loss tokens are all in this process.
double step(OuroborosDriver& d, const model::ModelConfig& c, int64_t t) {
  const std::vector<model::MicroBatch> batches = mini_batch(c, t);
  return d.step(batches, tokens_of(batches), kLr);
}

std::vector<double> ouroboros_losses(OuroborosDriver& d, const model::ModelConfig& c, int64_t iters) {
  std::vector<double> losses;
  for (int64_t t = 0; t < iters; ++t) losses.push_back(step(d, c, t));
  return losses;
}

TEST(OuroborosDriver, EveryDelayZeroIsPlainTrainingBitForBit) {
  const int64_t iters = 4;
  for (int K : {1, 3}) {
    SCOPED_TRACE(str_cat("K=", K));
    const model::ModelConfig c = config(3);
    model::ParameterSet plain;
    const std::vector<double> expected = plain_losses(c, iters, plain);
    // K = 1 has no delay; K = 3 with a warm-up over every iteration is synchronous throughout.
    OuroborosDriver d(c, {K, K == 1 ? 0 : iters, adam(), kSeed});
    const std::vector<double> got = ouroboros_losses(d, c, iters);
    for (int64_t t = 0; t < iters; ++t) EXPECT_EQ(got[t], expected[t]) << "iteration " << t;
    // And the weights: every module's parameters equal plain training's of the same name.
    for (int k = 0; k < K; ++k)
      for (const model::Parameter& p : d.parameters(k).params())
        EXPECT_TRUE(same_bits(p.value, plain.get(p.spec.name).value)) << "module " << k << " " << p.spec.name;
  }
  // The check can fail: without the warm-up the modules below the last learn late, and the losses part.
  const model::ModelConfig c = config(3);
  model::ParameterSet plain;
  const std::vector<double> expected = plain_losses(c, iters, plain);
  OuroborosDriver delayed(c, {3, 0, adam(), kSeed});
  const std::vector<double> got = ouroboros_losses(delayed, c, iters);
  EXPECT_EQ(got[0], expected[0]);  // the first forward is at the same weights
  EXPECT_NE(got[iters - 1], expected[iters - 1]);
}

// The rule's reference: module k's gradient at iteration t is the synchronous gradient of mini-batch
// s = t - (K-1-k) with every module at its weights of iteration s. A second set of K modules, set to
// stored snapshots, computes it by plain backpropagation through the chunks.
struct Reference {
  std::vector<std::unique_ptr<model::ParameterSet>> params;
  std::vector<std::unique_ptr<model::LanguageModelChunk>> chunks;

  Reference(const model::ModelConfig& c, int K) {
    const int64_t per = c.num_layers / K;
    for (int k = 0; k < K; ++k) {
      params.push_back(std::make_unique<model::ParameterSet>());
      chunks.push_back(model::build_model_chunk(c, *params.back(), parallel::TensorParallelContext::single_process(),
                                                model::ModelChunk{k * per, per, k == 0, k == K - 1}));
      params.back()->allocate(kSeed);
    }
  }
  // Gradients of mini-batch s at the weights `weights` (one flat buffer per module) left in params.
  void backprop(const model::ModelConfig& c, int64_t s, const std::vector<Tensor>& weights) {
    const int K = static_cast<int>(chunks.size());
    std::vector<model::MicroBatch> batches = mini_batch(c, s);
    const double tokens = tokens_of(batches);
    for (int k = 0; k < K; ++k) {
      std::memcpy(params[k]->values().f32(), weights[k].f32(), weights[k].numel() * sizeof(float));
      params[k]->weights_changed();
      params[k]->zero_grad();
    }
    for (const model::MicroBatch& mb : batches) {
      std::vector<std::unique_ptr<model::ChunkRecord>> recs;
      model::LossSums sums;
      Tensor x;
      for (int k = 0; k < K; ++k) {
        recs.push_back(chunks[k]->make_record());
        x = chunks[k]->forward(mb, x, context(c, s, mb, tokens), *recs[k], sums);
      }
      Tensor g;
      for (int k = K - 1; k >= 0; --k)
        g = chunks[k]->backward(*recs[k], g, context(c, s, mb, tokens), static_cast<float>(1.0 / tokens));
    }
  }
  const Tensor& grad(int k, const std::string& name) { return params[k]->get(name).grad; }
};

void expect_each_module_applies_the_rule(const model::ModelConfig& c, int K, int64_t warmup, int64_t iters) {
  SCOPED_TRACE(str_cat("K=", K, " warm-up ", warmup, c.mla.enabled ? " MLA" : "",
                       c.mtp_num_layers ? str_cat(" MTP ", c.mtp_num_layers) : std::string(),
                       c.position_embedding == model::PositionEmbedding::LearnedAbsolute ? " learned positions" : ""));
  const bool mla = c.mla.enabled;
  OuroborosDriver d(c, {K, warmup, adam(), kSeed});
  Reference ref(c, K);
  std::vector<std::vector<Tensor>> snapshots;  // [iteration][module]: the weights w^t
  // The parameters modules 0 and K-1 share (V; P with MTP over learned positions): the next test.
  const std::vector<std::string> tied = d.tied_names();
  const auto is_tied = [&](const std::string& name) {
    return std::find(tied.begin(), tied.end(), name) != tied.end();
  };
  int checked_stale = 0;
  for (int64_t t = 0; t < iters; ++t) {
    snapshots.emplace_back();
    for (int k = 0; k < K; ++k) snapshots.back().push_back(d.parameters(k).values().clone());
    step(d, c, t);
    for (int k = 0; k < K; ++k) {
      const int64_t s = d.last_backward_batch(k);
      EXPECT_EQ(s, pipeline::ouroboros_backward_batch(d.shape(), k, t));
      if (s < 0) {  // no gradient: the module kept its weights (but the tied ones, which module K-1 updates)
        for (const model::Parameter& p : d.parameters(k).params()) {
          if (is_tied(p.spec.name)) continue;
          EXPECT_TRUE(same_bits(p.value, snapshots[t][k].flat_range(p.offset, p.value.numel())))
              << "iteration " << t << " module " << k << " " << p.spec.name;
        }
        continue;
      }
      ref.backprop(c, s, snapshots[s]);
      for (const model::Parameter& p : d.parameters(k).params()) {
        if (is_tied(p.spec.name)) continue;  // the tied embeddings: next test
        EXPECT_TRUE(same_bits(p.grad, ref.grad(k, p.spec.name)))
            << "iteration " << t << " module " << k << " (mini-batch " << s << ") " << p.spec.name;
      }
      if (s < t) ++checked_stale;
    }
    // The check can fail: at a stale module, the fresh gradient (mini-batch t at w^t) differs.
    if (t == iters - 1) {
      ref.backprop(c, t, snapshots[t]);
      const std::string w = mla ? "decoder.layers.0.self_attention.linear_kv_down_proj.weight"
                                : "decoder.layers.0.self_attention.linear_qkv.weight";
      EXPECT_FALSE(same_bits(d.parameters(0).get(w).grad, ref.grad(0, w)));
    }
  }
  EXPECT_GT(checked_stale, 0);
  // What the rule keeps in the steady state: module k holds K-1-k weight versions and the activations of
  // K-1-k mini-batches (each of its micro-batches) beyond the one it just ran.
  for (int k = 0; k < K; ++k) {
    EXPECT_EQ(d.held_weight_versions(k), K - 1 - k) << "module " << k;
    EXPECT_EQ(d.held_records(k), (K - 1 - k) * kMicroBatches) << "module " << k;
  }
}

TEST(OuroborosDriver, EachModuleAppliesTheGradientOfItsMiniBatchAtThatIterationsWeights) {
  expect_each_module_applies_the_rule(config(3), 3, 1, 7);
  expect_each_module_applies_the_rule(config(4), 4, 2, 8);
}

// Multi-Latent Attention layers in the modules: plain training bit for bit with every delay 0, and the rule.
TEST(OuroborosDriver, MultiLatentAttentionModulesFollowTheRule) {
  const int64_t iters = 3;
  const model::ModelConfig c = mla_config(3);
  model::ParameterSet plain;
  const std::vector<double> expected = plain_losses(c, iters, plain);
  OuroborosDriver d(c, {3, iters, adam(), kSeed});
  EXPECT_EQ(ouroboros_losses(d, c, iters), expected);
  for (int k = 0; k < 3; ++k)
    for (const model::Parameter& p : d.parameters(k).params())
      EXPECT_TRUE(same_bits(p.value, plain.get(p.spec.name).value)) << "module " << k << " " << p.spec.name;
  expect_each_module_applies_the_rule(mla_config(3), 3, 1, 5);
}

// Each parameter modules 0 and K-1 share: V (the output layer's and the MTP modules' lookups: fresh), and
// with MTP over learned positions P (the modules' lookups of the rolled positions: fresh); module 0's
// input embedding term of each is stale.
void expect_tied_gradient_is_fresh_output_term_plus_stale_input_term(const model::ModelConfig& c) {
  const bool learned = c.position_embedding == model::PositionEmbedding::LearnedAbsolute;
  SCOPED_TRACE(str_cat(c.mtp_num_layers ? str_cat("MTP ", c.mtp_num_layers) : std::string("no MTP"),
                       learned ? " learned positions" : ""));
  const int K = 3;
  const int64_t warmup = 1, iters = 6;
  OuroborosDriver d(c, {K, warmup, adam(), kSeed});
  Reference ref(c, K);
  std::vector<std::vector<Tensor>> snapshots;
  const std::string V = "embedding.word_embeddings.weight", P = "embedding.position_embeddings.weight";
  const std::vector<std::string> tied = d.tied_names();
  // P is tied exactly where the MTP modules on module K-1 look positions up.
  const std::vector<std::string> expected_tied =
      learned && c.mtp_num_layers > 0 ? std::vector<std::string>{V, P} : std::vector<std::string>{V};
  EXPECT_EQ(tied, expected_tied);
  EXPECT_TRUE(same_bits(d.tied_gradient(V), d.tied_gradient()));
  int checked_both = 0;
  for (int64_t t = 0; t < iters; ++t) {
    snapshots.emplace_back();
    for (int k = 0; k < K; ++k) snapshots.back().push_back(d.parameters(k).values().clone());
    step(d, c, t);
    const int64_t s0 = d.last_backward_batch(0);
    // The fresh terms: mini-batch t at w^t, from module K-1.
    ref.backprop(c, t, snapshots[t]);
    std::vector<Tensor> fresh;
    for (const std::string& name : tied) fresh.push_back(ref.grad(K - 1, name).clone());
    // The input embedding's terms: mini-batch s0 at w^{s0}, from module 0.
    if (s0 >= 0) ref.backprop(c, s0, snapshots[s0]);
    for (size_t u = 0; u < tied.size(); ++u) {
      const std::string& name = tied[u];
      SCOPED_TRACE(name);
      const Tensor& out = fresh[u];
      const Tensor& got = d.tied_gradient(name);
      if (s0 < 0) {  // module 0 has no gradient yet: the fresh term alone, accumulated in the same order
        EXPECT_TRUE(same_bits(got, out)) << "iteration " << t;
        continue;
      }
      const Tensor& in = ref.grad(0, name);
      double worst = 0, in_size = 0, out_size = 0;
      for (int64_t i = 0; i < got.numel(); ++i) {
        const double want = static_cast<double>(out.f32()[i]) + in.f32()[i];
        // fp32 sums in another order: each term is itself rows scatter-added onto the running sum of the
        // micro-batches' terms (V: output layer, MTP lookups, input embedding; P: MTP lookups, input
        // embedding), so within some tens of ulps of the terms' size. (A missing term is off by its size.)
        const double tol = 4e-6 * (std::fabs(out.f32()[i]) + std::fabs(in.f32()[i])) + 1e-12;
        worst = std::max(worst, std::fabs(got.f32()[i] - want) / tol);
        in_size = std::max(in_size, static_cast<double>(std::fabs(in.f32()[i])));
        out_size = std::max(out_size, static_cast<double>(std::fabs(out.f32()[i])));
      }
      EXPECT_LE(worst, 1.0) << "iteration " << t;
      EXPECT_GT(in_size, 1e-6) << "the input term must matter for the check to mean anything";
      EXPECT_GT(out_size, 1e-6) << "the fresh term must matter for the check to mean anything";
      if (s0 < t) ++checked_both;
    }
  }
  EXPECT_GT(checked_both, 0);
  // The two copies of each (module 0's and module K-1's) stay equal.
  for (const std::string& name : tied)
    EXPECT_TRUE(same_bits(d.parameters(0).get(name).value, d.parameters(K - 1).get(name).value)) << name;
}

TEST(OuroborosDriver, TiedEmbeddingGradientIsFreshOutputTermPlusStaleInputTerm) {
  expect_tied_gradient_is_fresh_output_term_plus_stale_input_term(config(3));
}

// DeepSeek-V3's multi-token prediction (issue 53) on module K-1, after its output layer: with every delay 0
// plain training bit for bit (the modules' objective, scaled by --mtp-loss-scaling-factor, in the backward as
// in one process) with the same mtp_k losses; under the rule the modules' gradients are fresh as the output
// layer's, and their lookups of V (module K-1's copy) are in its fresh term.
TEST(OuroborosDriver, MultiTokenPredictionRunsOnTheLastModule) {
  const int64_t iters = 3;
  using model::PositionEmbedding;
  for (PositionEmbedding positions : {PositionEmbedding::Rope, PositionEmbedding::LearnedAbsolute})
  for (int64_t depth : {1, 2}) {
    const bool learned = positions == PositionEmbedding::LearnedAbsolute;
    SCOPED_TRACE(str_cat("MTP ", depth, learned ? " learned positions" : " RoPE"));
    const model::ModelConfig c = mtp_config(3, depth, positions);
    model::ParameterSet plain;
    std::vector<std::vector<double>> plain_mtp;
    const std::vector<double> expected = plain_losses(c, iters, plain, &plain_mtp);
    OuroborosDriver d(c, {3, iters, adam(), kSeed});
    ASSERT_EQ(d.auxiliary_loss_names().size(), static_cast<size_t>(depth));
    EXPECT_EQ(d.auxiliary_loss_names().back(), str_cat("mtp_", depth, " loss"));
    EXPECT_NE(d.parameters(2).find("mtp.layers.0.eh_proj.weight"), nullptr) << "the modules are on module K-1";
    // Learned positions: module K-1 holds its copy of P (the modules look the rolled positions up in it).
    const model::Parameter* copy = d.parameters(2).find("embedding.position_embeddings.weight");
    EXPECT_EQ(copy != nullptr, learned);
    if (copy) {
      EXPECT_TRUE(copy->spec.tied_copy);
    }
    for (int64_t t = 0; t < iters; ++t) {
      EXPECT_EQ(step(d, c, t), expected[t]) << "iteration " << t;
      EXPECT_EQ(d.last_auxiliary_sums(), plain_mtp[t]) << "iteration " << t;
      for (double v : d.last_auxiliary_sums()) EXPECT_GT(v, 0) << "iteration " << t;
    }
    for (int k = 0; k < 3; ++k)
      for (const model::Parameter& p : d.parameters(k).params())
        EXPECT_TRUE(same_bits(p.value, plain.get(p.spec.name).value)) << "module " << k << " " << p.spec.name;
  }
  // The check can fail: without the scaling factor the modules' gradients do not reach the layers below.
  model::ModelConfig off = mtp_config(3, 1);
  off.mtp_loss_scaling_factor = 0;
  model::ParameterSet plain;
  plain_losses(mtp_config(3, 1), iters, plain);
  OuroborosDriver d(off, {3, iters, adam(), kSeed});
  ouroboros_losses(d, off, iters);
  EXPECT_FALSE(same_bits(d.parameters(0).get("decoder.layers.0.mlp.linear_fc1.weight").value,
                         plain.get("decoder.layers.0.mlp.linear_fc1.weight").value));
  expect_each_module_applies_the_rule(mtp_config(3, 1), 3, 1, 5);
  expect_tied_gradient_is_fresh_output_term_plus_stale_input_term(mtp_config(3, 2));
  // Learned positions: the rule for every module's own parameters, and P's fresh and stale terms.
  expect_each_module_applies_the_rule(mtp_config(3, 1, PositionEmbedding::LearnedAbsolute), 3, 1, 5);
  expect_tied_gradient_is_fresh_output_term_plus_stale_input_term(mtp_config(3, 2, PositionEmbedding::LearnedAbsolute));
  // The check can fail: without MTP P is module 0's alone, updated late with module 0's gradient.
  const OuroborosDriver no_mtp(config(3), {3, 1, adam(), kSeed});
  EXPECT_EQ(no_mtp.tied_names(), std::vector<std::string>(1, "embedding.word_embeddings.weight"));
  EXPECT_NE(no_mtp.chunk(0).config().position_embedding, model::PositionEmbedding::Rope);
}

}  // namespace
}  // namespace tessera::train
