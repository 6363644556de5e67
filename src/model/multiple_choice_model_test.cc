// MultipleChoiceModel: the [questions x choices] grouping of rows equals scoring each choice on its own,
// padded keys are ignored, gradients match finite differences, and the encoder's parameters are
// BertModel's (so a pretrained BERT loads by name).
#include "model/multiple_choice_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/philox.h"
#include "model/model_testing.h"
#include "model/bert_model.h"
#include "model/model_factory.h"

namespace tessera::model {
namespace {

ModelConfig tiny_config(float dropout) {
  ModelConfig c;
  c.family = kMultipleChoiceFamily;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.num_query_groups = 4;
  c.kv_channels = 4;
  c.ffn_hidden_size = 64;
  c.seq_length = 7;
  c.max_position_embeddings = 8;
  c.vocab_size = 13;
  c.padded_vocab_size = 16;
  c.num_tokentypes = 2;
  c.bert_binary_head = false;
  c.hidden_dropout = dropout;
  c.attention_dropout = dropout;
  c.init_method_std = 0.2f;  // large enough that every path carries gradient
  return c;
}

// `questions` questions of 4 choices: random ids, [CLS]-like first token, a question part of type 0, a
// context of type 1 and some padding at the end of each row (a different amount per row).
MicroBatch random_batch(const ModelConfig& c, int64_t questions, uint64_t seed) {
  const int64_t rows = 4 * questions, seq = c.seq_length;
  MicroBatch mb;
  mb.tokens = Tensor::empty({rows, seq}, DType::I32);
  mb.token_types = Tensor::empty({rows, seq}, DType::I32);
  mb.padding_mask = Tensor::empty({rows, seq}, DType::I32);
  mb.choice_label = Tensor::empty({questions}, DType::I32);
  PhiloxStream s(seed, 1);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t length = seq - static_cast<int64_t>(r % 3);  // 0, 1 or 2 pads
    for (int64_t j = 0; j < seq; ++j) {
      const int64_t i = r * seq + j;
      const bool token = j < length;
      mb.tokens.i32()[i] = token ? static_cast<int32_t>(s.bits(i) % c.vocab_size) : 0;
      mb.token_types.i32()[i] = token && j >= 3 ? 1 : 0;
      mb.padding_mask.i32()[i] = token ? 1 : 0;
    }
  }
  for (int64_t q = 0; q < questions; ++q) mb.choice_label.i32()[q] = static_cast<int32_t>(s.bits(1000 + q) % 4);
  return mb;
}

// Rows [first, first + count) of a [rows, seq] tensor, as a tensor of their own.
Tensor rows_of(const Tensor& t, int64_t first, int64_t count) { return t.narrow(first, count).clone(); }

ForwardContext context(const ModelConfig& c, int64_t rows, bool training) {
  ForwardContext ctx = testing::context(c, rows, training);
  ctx.sample_offset = 0;
  return ctx;
}

TEST(MultipleChoiceModel, GroupedChoicesEqualALoopOverChoices) {
  const ModelConfig c = tiny_config(0.0f);
  ParameterSet params;
  register_multiple_choice_family();
  const auto model = build_model_chunk(c, params);  // through the factory, as the fine-tuning builds it
  params.allocate(42);
  const int64_t questions = 3, rows = 4 * questions;
  const MicroBatch mb = random_batch(c, questions, 5);

  // Each choice alone: a "question" of one choice, whose label logit is the choice's logit.
  std::vector<double> z(rows);
  for (int64_t r = 0; r < rows; ++r) {
    MicroBatch one;
    one.tokens = rows_of(mb.tokens, r, 1);
    one.token_types = rows_of(mb.token_types, r, 1);
    one.padding_mask = rows_of(mb.padding_mask, r, 1);
    one.choice_label = Tensor::zeros({1}, DType::I32);
    const Tensor s = model->score(one, Tensor(), context(c, 1, false));
    ASSERT_EQ(s.numel(), 3);
    z[r] = s.f32()[0];
    EXPECT_NEAR(s.f32()[1], z[r], 1e-5);  // the log-sum-exp of one logit is itself
  }

  // All together: logits viewed as [questions, 4], the cross-entropy per question summed.
  LossSums losses;
  auto rec = model->make_record();
  model->forward(mb, Tensor(), context(c, rows, false), *rec, losses);
  const Tensor scores = model->score(mb, Tensor(), context(c, rows, false));
  ASSERT_EQ(scores.numel(), 3 * questions);
  double expected_loss = 0;
  for (int64_t q = 0; q < questions; ++q) {
    const int32_t label = mb.choice_label.i32()[q];
    double m = -1e30, sum = 0;
    int best = 0;
    for (int k = 0; k < 4; ++k) {
      if (z[4 * q + k] > m) best = k;
      m = std::max(m, z[4 * q + k]);
    }
    for (int k = 0; k < 4; ++k) sum += std::exp(z[4 * q + k] - m);
    const double lse = m + std::log(sum);
    expected_loss += lse - z[4 * q + label];
    EXPECT_NEAR(scores.f32()[3 * q], z[4 * q + label], 1e-5) << "question " << q;
    EXPECT_NEAR(scores.f32()[3 * q + 1], lse, 1e-5) << "question " << q;
    EXPECT_EQ(static_cast<int>(scores.f32()[3 * q + 2]), best) << "question " << q;
  }
  EXPECT_NEAR(losses.lm, expected_loss, 1e-5 * (1 + std::abs(expected_loss)));
  // The choices differ, so this is not trivially true.
  EXPECT_GT(std::abs(z[0] - z[1]) + std::abs(z[1] - z[2]), 1e-4);
}

TEST(MultipleChoiceModel, PaddedPositionsDoNotMatter) {
  const ModelConfig c = tiny_config(0.0f);
  ParameterSet params;
  MultipleChoiceModel model(c, params);
  params.allocate(42);
  MicroBatch mb = random_batch(c, 1, 6);
  const Tensor before = model.score(mb, Tensor(), context(c, 4, false)).clone();
  for (int64_t i = 0; i < mb.tokens.numel(); ++i)
    if (mb.padding_mask.i32()[i] == 0) mb.tokens.i32()[i] = 11;
  const Tensor after = model.score(mb, Tensor(), context(c, 4, false));
  for (int64_t i = 0; i < 2; ++i) EXPECT_NEAR(after.f32()[i], before.f32()[i], 1e-6);
  // A real token does change it.
  mb.tokens.i32()[1] = (mb.tokens.i32()[1] + 1) % static_cast<int32_t>(c.vocab_size);
  const Tensor changed = model.score(mb, Tensor(), context(c, 4, false));
  EXPECT_GT(std::abs(changed.f32()[1] - before.f32()[1]), 1e-6);
}

// Every parameter's gradient against central differences of the loss (dropout on: the masks are keyed by
// coordinates, so the perturbed forwards see the same ones).
TEST(MultipleChoiceModel, GradientsMatchFiniteDifferences) {
  const ModelConfig c = tiny_config(0.1f);
  ParameterSet params;
  MultipleChoiceModel model(c, params);
  params.allocate(42);
  const int64_t questions = 2, rows = 4 * questions;
  const MicroBatch mb = random_batch(c, questions, 5);
  const ForwardContext ctx = context(c, rows, true);
  const float scale = 1.0f / static_cast<float>(questions);
  {
    LossSums losses;
    auto rec = model.make_record();
    params.zero_grad();
    model.forward(mb, Tensor(), ctx, *rec, losses);
    model.backward(*rec, Tensor(), ctx, scale);
  }
  std::vector<float> analytic(params.grads().f32(), params.grads().f32() + params.numel());
  auto loss = [&]() {
    LossSums losses;
    auto rec = model.make_record();
    model.forward(mb, Tensor(), ctx, *rec, losses);
    return losses.lm * scale;
  };
  float* w = params.values().f32();
  PhiloxStream pick(9, 9);
  int checked = 0;
  for (const Parameter& p : params.params()) {
    const int64_t n = p.value.numel();
    for (int trial = 0; trial < std::min<int64_t>(n, 6); ++trial) {
      const int64_t i = p.offset + static_cast<int64_t>(pick.bits(checked) % n);
      const float h = 1e-2f;
      const float saved = w[i];
      w[i] = saved + h;
      const double up = loss();
      w[i] = saved - h;
      const double down = loss();
      w[i] = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(analytic[i], numeric, 2e-4 + 2e-2 * std::abs(numeric)) << p.spec.name << " element " << i - p.offset;
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
  // The head and the pooler do learn.
  double head = 0;
  for (int64_t k = 0; k < c.hidden_size; ++k)
    head += std::abs(params.get("multichoice_head.weight").grad.f32()[k]);
  EXPECT_GT(head, 0);
}

TEST(MultipleChoiceModel, EncoderParametersAreBertModels) {
  ModelConfig c = tiny_config(0.1f);
  ParameterSet mc_params, bert_params;
  MultipleChoiceModel mc(c, mc_params);
  ModelConfig b = c;
  b.family = "bert";
  b.bert_binary_head = true;
  BertModel bert(b, bert_params);
  std::map<std::string, Shape> bert_shapes;
  for (const Parameter& p : bert_params.params()) bert_shapes[p.spec.name] = p.spec.shape;
  int shared = 0;
  for (const Parameter& p : mc_params.params()) {
    if (p.spec.name.rfind("multichoice_head.", 0) == 0) continue;
    ASSERT_TRUE(bert_shapes.count(p.spec.name)) << p.spec.name << " is not a BertModel parameter";
    EXPECT_EQ(bert_shapes[p.spec.name], p.spec.shape) << p.spec.name;
    ++shared;
  }
  EXPECT_EQ(shared + 2, static_cast<int>(mc_params.params().size()));
  EXPECT_TRUE(bert_shapes.count("pooler.dense.weight"));
  EXPECT_TRUE(bert_shapes.count("embedding.tokentype_embeddings.weight"));
}

TEST(MultipleChoiceModel, NeedsALabelPerQuestion) {
  const ModelConfig c = tiny_config(0.0f);
  ParameterSet params;
  MultipleChoiceModel model(c, params);
  params.allocate(1);
  MicroBatch mb = random_batch(c, 2, 1);
  mb.choice_label = Tensor::zeros({3}, DType::I32);  // 8 rows do not split into 3 questions
  EXPECT_THROW(model.score(mb, Tensor(), context(c, 8, false)), Error);
  mb.choice_label = Tensor::zeros({2}, DType::I32);
  mb.choice_label.i32()[1] = 4;  // choices 0..3
  EXPECT_THROW(model.score(mb, Tensor(), context(c, 8, false)), Error);
}

}  // namespace
}  // namespace tessera::model
