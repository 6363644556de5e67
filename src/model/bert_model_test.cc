// BERT's gradients against finite differences of its objective (masked LM + sentence order), in both
// layer orderings, with and without the binary head, with padding and dropout; and what padding means.
#include "model/bert_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.h"
#include "model/bert_testing.h"
#include "model/model_factory.h"
#include "model/model_testing.h"

namespace tessera::model {
namespace {

ModelConfig tiny_bert(bool post_ln, bool binary_head) { return testing::tiny_bert_config(post_ln, binary_head); }
using testing::bert_batch;

ForwardContext context(const ModelConfig& c, int64_t batch, bool training) {
  ForwardContext ctx = testing::context(c, batch, training);
  ctx.per_sample_loss_weight = 2.5;  // the sentence-order loss enters the objective this much heavier
  return ctx;
}

double objective(const BertModel& model, const MicroBatch& mb, const ForwardContext& ctx, LossSums* out = nullptr) {
  BertActivations rec;
  LossSums losses;
  model.forward(mb, Tensor(), ctx, rec, losses);
  if (out) *out = losses;
  double total = losses.lm;
  for (const auto& [name, value] : losses.auxiliary) total += value;
  return total;
}

void check_gradients(bool post_ln, bool binary_head) {
  SCOPED_TRACE(::testing::Message() << (post_ln ? "post-LN" : "pre-LN") << (binary_head ? " with" : " without")
                                    << " the binary head");
  ModelConfig c = tiny_bert(post_ln, binary_head);
  ParameterSet params;
  BertModel model(c, params);
  params.allocate(42);
  const MicroBatch mb = bert_batch(c, {7, 5, 3}, 5);
  const ForwardContext ctx = context(c, 3, true);
  const float scale = 0.1f;

  BertActivations rec;
  LossSums losses;
  model.forward(mb, Tensor(), ctx, rec, losses);
  EXPECT_EQ(losses.auxiliary.size(), binary_head ? 1u : 0u);
  model.backward(rec, Tensor(), ctx, scale);
  std::vector<float> analytic(params.grads().f32(), params.grads().f32() + params.numel());

  float* w = params.values().f32();
  PhiloxStream pick(9, 9);
  int checked = 0;
  for (const Parameter& p : params.params()) {
    const int64_t n = p.value.numel();
    for (int trial = 0; trial < std::min<int64_t>(n, 6); ++trial) {
      const int64_t i = p.offset + static_cast<int64_t>(pick.bits(checked) % n);
      const float h = 1e-2f, saved = w[i];
      w[i] = saved + h;
      const double up = objective(model, mb, ctx) * scale;
      w[i] = saved - h;
      const double down = objective(model, mb, ctx) * scale;
      w[i] = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[i], numeric, 2e-4 + 2e-2 * std::abs(numeric)) << p.spec.name << " element " << i - p.offset;
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
  // The heads' parameters exist by Megatron-Core's names, the binary head's only with it.
  EXPECT_NO_THROW(params.get("lm_head.dense.weight"));
  EXPECT_NO_THROW(params.get("output_layer.bias"));
  EXPECT_NO_THROW(params.get("encoder.layers.1.self_attention.linear_qkv.weight"));
  if (binary_head) EXPECT_NO_THROW(params.get("binary_head.weight"));
  else EXPECT_THROW(params.get("pooler.dense.weight"), Error);
}

TEST(BertModel, GradientsMatchFiniteDifferencesPreLn) { check_gradients(false, true); }
TEST(BertModel, GradientsMatchFiniteDifferencesPostLn) { check_gradients(true, true); }
TEST(BertModel, GradientsMatchFiniteDifferencesWithoutBinaryHead) { check_gradients(false, false); }

// Padding is invisible: what the padded positions hold changes nothing, and a sample padded to a longer
// sequence scores as it does unpadded (no dropout, so that masks keyed by position do not differ).
TEST(BertModel, PaddingChangesNothing) {
  ModelConfig c = tiny_bert(false, true);
  c.hidden_dropout = c.attention_dropout = 0.0f;
  ParameterSet params;
  BertModel model(c, params);
  params.allocate(3);
  MicroBatch mb = bert_batch(c, {7, 4}, 11);
  LossSums base;
  objective(model, mb, context(c, 2, true), &base);
  for (int64_t j = 4; j < 7; ++j) {  // sample 1's padding: other ids and types
    mb.tokens.i32()[7 + j] = static_cast<int32_t>(j + 3);
    mb.token_types.i32()[7 + j] = 1;
  }
  LossSums changed;
  objective(model, mb, context(c, 2, true), &changed);
  EXPECT_DOUBLE_EQ(changed.lm, base.lm);
  EXPECT_DOUBLE_EQ(changed.auxiliary[0].second, base.auxiliary[0].second);

  // Sample 1 alone at seq 4 against its padded form at seq 7 (the other sample dropped).
  ModelConfig short_c = c;
  short_c.seq_length = 4;
  ParameterSet short_params;
  BertModel short_model(short_c, short_params);
  short_params.allocate(3);  // same names and seed: the same weights
  MicroBatch alone = bert_batch(short_c, {4}, 0), padded = bert_batch(c, {4}, 0);
  for (int64_t j = 0; j < 4; ++j) {
    for (Tensor* t : {&alone.tokens, &padded.tokens}) t->i32()[j] = mb.tokens.i32()[7 + j];
    for (Tensor* t : {&alone.labels, &padded.labels}) t->i32()[j] = mb.labels.i32()[7 + j];
  }
  LossSums a, p;
  objective(short_model, alone, context(short_c, 1, true), &a);
  objective(model, padded, context(c, 1, true), &p);
  EXPECT_NEAR(a.lm, p.lm, 1e-5 * std::abs(a.lm));
  EXPECT_NEAR(a.auxiliary[0].second, p.auxiliary[0].second, 1e-5 * std::abs(a.auxiliary[0].second));
}

// Post-LN puts the layers' norms on the residual path: with zero attention and MLP outputs (zero
// output projections) a post-LN layer is y = norm2(norm1(x)), so the layers' norm biases change the
// result, while a pre-LN layer is y = x and they change nothing.
TEST(BertModel, PostLnPutsTheNormsOnTheResidualPath) {
  for (bool post_ln : {false, true}) {
    SCOPED_TRACE(post_ln ? "post-LN" : "pre-LN");
    ModelConfig c = tiny_bert(post_ln, false);
    c.hidden_dropout = c.attention_dropout = 0.0f;
    ParameterSet params;
    BertModel model(c, params);
    params.allocate(5);
    for (Parameter& p : params.params())
      if (p.spec.name.find("linear_proj") != std::string::npos || p.spec.name.find("linear_fc2") != std::string::npos)
        p.value.zero_();
    const MicroBatch mb = bert_batch(c, {7}, 2);
    LossSums before;
    objective(model, mb, context(c, 1, false), &before);
    // A bias that differs per channel, so that the next norm does not undo it.
    for (Parameter& p : params.params())
      if (p.spec.name.find("encoder.layers.") != std::string::npos && p.spec.name.find("layernorm.bias") != std::string::npos)
        for (int64_t i = 0; i < p.value.numel(); ++i) p.value.f32()[i] = 0.3f * static_cast<float>(i % 5) - 0.6f;
    LossSums after;
    objective(model, mb, context(c, 1, false), &after);
    if (post_ln)
      EXPECT_GT(std::abs(after.lm - before.lm), 1e-4);
    else
      EXPECT_EQ(after.lm, before.lm);
  }
}

TEST(BertModel, BuiltThroughTheFactoryAndRejectsWhatItCannotDo) {
  ModelConfig c = tiny_bert(false, true);
  ParameterSet params;
  auto chunk = build_model_chunk(c, params);
  EXPECT_EQ(chunk->auxiliary_loss_names(), std::vector<std::string>{"sop loss"});
  EXPECT_THROW(chunk->start_decoding(4), Error);
  ModelConfig wrong_types = c;
  wrong_types.num_tokentypes = 0;
  ParameterSet other;
  EXPECT_THROW(BertModel(wrong_types, other), Error);
}

}  // namespace
}  // namespace tessera::model
