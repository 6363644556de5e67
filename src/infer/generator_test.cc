#include "infer/generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace tessera::infer {
namespace {

TEST(SampleToken, GreedyTopKAndTopP) {
  std::vector<float> logits = {0.0f, 3.0f, 1.0f, 2.0f, 50.0f};  // id 4 is vocabulary padding
  SamplingOptions greedy;
  greedy.temperature = 0;
  EXPECT_EQ(sample_token(logits.data(), 4, greedy, 0), 1);  // padding never wins
  SamplingOptions top2;
  top2.top_k = 2;
  std::map<int32_t, int> counts;
  for (uint64_t s = 0; s < 4000; ++s) counts[sample_token(logits.data(), 4, top2, s)]++;
  EXPECT_EQ(counts.size(), 2u);  // only ids 1 and 3
  double expected = 1.0 / (1.0 + std::exp(-1.0));  // p(1) = e^3 / (e^3 + e^2)
  EXPECT_NEAR(counts[1] / 4000.0, expected, 0.03);
  SamplingOptions nucleus;
  nucleus.top_p = 0.5f;  // id 1 alone holds > 50% of the mass
  for (uint64_t s = 0; s < 100; ++s) EXPECT_EQ(sample_token(logits.data(), 4, nucleus, s), 1);
  // The same seed and step give the same token.
  SamplingOptions t;
  t.random_seed = 9;
  EXPECT_EQ(sample_token(logits.data(), 4, t, 17), sample_token(logits.data(), 4, t, 17));
}

TEST(SampleToken, OptionsAreValidated) {
  SamplingOptions o;
  o.top_p = 1.5f;
  EXPECT_THROW(validate(o), Error);
  o = {};
  o.top_k = 3;
  o.top_p = 0.5f;
  EXPECT_THROW(validate(o), Error);
  o = {};
  o.temperature = -1;
  EXPECT_THROW(validate(o), Error);
}

TEST(Generate, GreedyDecodingWithTheCacheEqualsRecomputingTheWholeSequence) {
  model::GptConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.num_query_groups = 2;
  c.kv_channels = 8;
  c.ffn_hidden_size = 32;
  c.seq_length = 16;
  c.max_position_embeddings = 16;
  c.vocab_size = 20;
  c.padded_vocab_size = 32;
  c.init_method_std = 0.5f;
  model::ParameterSet params;
  model::GptModel m(c, params);
  params.allocate(5);
  SamplingOptions greedy;
  greedy.temperature = 0;
  greedy.tokens_to_generate = 8;
  std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  std::vector<int32_t> streamed;
  std::vector<int32_t> out = generate(m, prompt, greedy, [&](int32_t t) { streamed.push_back(t); });
  ASSERT_EQ(out.size(), 8u);
  EXPECT_EQ(streamed, out);
  // Without a cache: feed the whole sequence so far every step.
  std::vector<int32_t> seq = prompt;
  for (int32_t expected : out) {
    model::DecodeState fresh = m.start_decoding(c.seq_length);
    Tensor logits = m.next_token_logits(seq, fresh);
    EXPECT_EQ(sample_token(logits.f32(), c.vocab_size, greedy, 0), expected);
    seq.push_back(expected);
  }
  // Stops right after producing the end-of-document id (its first occurrence).
  greedy.eod = out.back();
  size_t first = std::find(out.begin(), out.end(), out.back()) - out.begin();
  EXPECT_EQ(generate(m, prompt, greedy).size(), first + 1);
}

}  // namespace
}  // namespace tessera::infer
