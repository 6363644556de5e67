#include "infer/generator.h"

#include "data/null_tokenizer.h"
#include "model/gpt_model.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/philox.h"

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

// sample_token as it was before top_ids: every id sorted by (logit descending, id ascending).
int32_t sample_by_sorting(const float* logits, int64_t vocab, const SamplingOptions& o, uint64_t key) {
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  const int64_t keep = std::min(o.top_k, vocab);
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_logit);
  std::vector<double> p(keep);
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) sum += p[i] = std::exp((logits[ids[i]] - logits[ids[0]]) / o.temperature);
  double u = PhiloxStream(o.random_seed, 0x73616d70).uniform(key) * sum;
  for (int64_t i = 0; i < keep; ++i) {
    u -= p[i];
    if (u < 0) return ids[i];
  }
  return ids[keep - 1];
}

// The one-pass top-k draws what sorting every id drew, ties (equal logits: the lower id first) included,
// for k below and above the one-pass limit and vocabularies around its 64-logit blocks.
TEST(SampleToken, TopKOfOnePassEqualsSortingEveryId) {
  for (int64_t vocab : {5, 64, 200, 50257})
    for (int64_t k : {1, 3, 20, 256, 300}) {
      SCOPED_TRACE(str_cat("vocab ", vocab, " top_k ", k));
      PhiloxStream r(vocab, 1);
      std::vector<float> logits(vocab);
      // Few distinct values, so that the k-th place is often a tie; rising late, so the heap is replaced.
      for (int64_t i = 0; i < vocab; ++i) logits[i] = std::floor(8 * r.uniform(i)) + (i > vocab / 2 ? 0.5f : 0.0f);
      SamplingOptions o;
      o.top_k = k;
      o.temperature = 0.7f;
      o.random_seed = 5;
      for (uint64_t key = 0; key < 40; ++key)
        ASSERT_EQ(sample_token(logits.data(), vocab, o, key), sample_by_sorting(logits.data(), vocab, o, key))
            << "key " << key;
    }
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

model::ModelConfig tiny_config() {
  model::ModelConfig c;
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
  return c;
}

TEST(Generate, GreedyDecodingWithTheCacheEqualsRecomputingTheWholeSequence) {
  model::ModelConfig c = tiny_config();
  model::ParameterSet params;
  model::GptModel m(c, params);
  params.allocate(5);
  auto runner = make_model_runner(m, parallel::TensorParallelContext::single_process());
  GenerationOptions greedy;
  greedy.sampling.temperature = 0;
  greedy.sampling.tokens_to_generate = 8;
  std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  std::vector<int32_t> streamed;
  std::vector<Generation> gen =
      generate(*runner, {prompt}, greedy, nullptr, [&](size_t i, int32_t t) { streamed.push_back(t); });
  ASSERT_EQ(gen.size(), 1u);
  ASSERT_EQ(gen[0].prompt_length, 5);
  std::vector<int32_t> out(gen[0].tokens.begin() + 5, gen[0].tokens.end());
  ASSERT_EQ(out.size(), 8u);
  EXPECT_EQ(streamed, out);
  // Without a cache: feed the whole sequence so far every step.
  std::vector<int32_t> seq = prompt;
  for (int32_t expected : out) {
    model::DecodeState fresh = m.start_decoding(c.seq_length);
    Tensor logits = m.next_token_logits(seq, fresh);
    EXPECT_EQ(sample_token(logits.f32(), c.vocab_size, greedy.sampling, 0), expected);
    seq.push_back(expected);
  }
  // Stops right after producing the end-of-document id (its first occurrence).
  greedy.sampling.eod = out.back();
  size_t first = std::find(out.begin(), out.end(), out.back()) - out.begin();
  EXPECT_EQ(generate(*runner, {prompt}, greedy)[0].tokens.size(), prompt.size() + first + 1);
}

TEST(Generate, BatchedPromptsOfDifferentLengthsEqualOneAtATime) {
  model::ModelConfig c = tiny_config();
  model::ParameterSet params;
  model::GptModel m(c, params);
  params.allocate(7);
  auto runner = make_model_runner(m, parallel::TensorParallelContext::single_process());
  GenerationOptions o;
  o.sampling.tokens_to_generate = 6;
  o.sampling.top_k = 5;
  o.sampling.random_seed = 3;
  std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5, 6, 7}, {9}, {4, 4, 2}};
  std::vector<Generation> batch = generate(*runner, prompts, o);
  ASSERT_EQ(batch.size(), 3u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(batch[i].prompt_length, static_cast<int64_t>(prompts[i].size()));
    EXPECT_EQ(batch[i].tokens.size(), prompts[i].size() + 6);
    // The sampling key of prompt i is (i << 32 | step): a prompt alone at index 0 draws prompt 0's numbers.
  }
  EXPECT_EQ(generate(*runner, {prompts[0]}, o)[0].tokens, batch[0].tokens);
  // The same seed reproduces the output; another seed (almost surely) changes it.
  EXPECT_EQ(generate(*runner, prompts, o)[2].tokens, batch[2].tokens);
}

// With a vocabulary large enough for the rows of a step to be sampled in parallel, two threads draw the
// tokens one thread draws, whichever thread samples which row (both top-k paths: one pass and sorting).
TEST(Generate, RowsSampledInParallelEqualOneThread) {
  model::ModelConfig c = tiny_config();
  c.vocab_size = 20000;
  c.padded_vocab_size = 20032;
  model::ParameterSet params;
  model::GptModel m(c, params);
  params.allocate(11);
  auto runner = make_model_runner(m, parallel::TensorParallelContext::single_process());
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {9}, {4, 4, 2, 7}, {5, 6}, {11, 12}, {13}};
  const int threads = omp_get_max_threads();
  for (int64_t top_k : {40, 0}) {
    SCOPED_TRACE(str_cat("top_k=", top_k));
    GenerationOptions o;
    o.sampling.tokens_to_generate = 5;
    o.sampling.top_k = top_k;
    o.sampling.random_seed = 21;
    omp_set_num_threads(1);
    const std::vector<Generation> serial = generate(*runner, prompts, o);
    omp_set_num_threads(2);
    const std::vector<Generation> parallel = generate(*runner, prompts, o);
    omp_set_num_threads(threads);
    ASSERT_EQ(parallel.size(), serial.size());
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(parallel[i].tokens, serial[i].tokens) << "prompt " << i;
    EXPECT_EQ(generate(*runner, {prompts[0]}, o)[0].tokens, serial[0].tokens);
  }
}

// Decoding from packed weights (a loaded model's, kernels/packed_linear.h) gives the logits of oneDNN's
// GEMMs on the weights as stored, to rounding, and the same greedy tokens, one sequence or several.
TEST(Generate, PackedWeightsGiveTheLogitsOfTheStoredWeights) {
  model::ModelConfig c = tiny_config();
  model::ParameterSet params;
  model::GptModel m(c, params);
  params.allocate(13);
  auto runner = make_model_runner(m, parallel::TensorParallelContext::single_process());
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  auto logits = [&] {
    DecodeSequence seq = runner->start(c.seq_length);
    Tensor l = runner->next_token_logits(prompt, seq);
    return std::vector<float>(l.f32(), l.f32() + l.numel());
  };
  GenerationOptions o;
  o.sampling.temperature = 0;
  o.sampling.tokens_to_generate = 6;
  const std::vector<std::vector<int32_t>> prompts = {prompt, {9, 2}, {7}};
  const std::vector<float> stored = logits();
  const std::vector<Generation> stored_tokens = generate(*runner, prompts, o);
  params.keep_packed_weights();
  const std::vector<float> packed = logits();
  const std::vector<Generation> packed_tokens = generate(*runner, prompts, o);
  ASSERT_EQ(packed.size(), stored.size());
  for (size_t i = 0; i < stored.size(); ++i) EXPECT_NEAR(packed[i], stored[i], 1e-5 + 1e-5 * std::abs(stored[i]));
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(packed_tokens[i].tokens, stored_tokens[i].tokens);
}

TEST(Generate, LogprobsAreTheLogSoftmaxOfTheFullRecomputation) {
  model::ModelConfig c = tiny_config();
  model::ParameterSet params;
  model::GptModel m(c, params);
  params.allocate(11);
  auto runner = make_model_runner(m, parallel::TensorParallelContext::single_process());
  GenerationOptions o;
  o.sampling.temperature = 0;
  o.sampling.tokens_to_generate = 4;
  o.return_logprobs = true;
  Generation g = generate(*runner, {{2, 7, 1}}, o)[0];
  ASSERT_EQ(g.tokens.size(), 7u);
  ASSERT_EQ(g.logprobs.size(), 6u);
  // Reference: logits of the whole prefix recomputed without the cache, log-softmax in float64.
  for (size_t i = 1; i < g.tokens.size(); ++i) {
    model::DecodeState fresh = m.start_decoding(c.seq_length);
    Tensor logits = m.next_token_logits(std::vector<int32_t>(g.tokens.begin(), g.tokens.begin() + i), fresh);
    double max = -1e30, sum = 0;
    for (int64_t v = 0; v < c.padded_vocab_size; ++v) max = std::max(max, double(logits.f32()[v]));
    for (int64_t v = 0; v < c.padded_vocab_size; ++v) sum += std::exp(logits.f32()[v] - max);
    double expected = logits.f32()[g.tokens[i]] - max - std::log(sum);
    EXPECT_NEAR(g.logprobs[i - 1], expected, 1e-4) << "token " << i;
  }
}

// Prompts that want their log-probabilities read the prompt a token a step, beside others that read theirs
// whole: every prompt's tokens and log-probabilities are what it gets alone.
TEST(Generate, LogprobsInABatchEqualThePromptAlone) {
  model::ModelConfig c = tiny_config();
  model::ParameterSet params;
  model::GptModel m(c, params);
  params.allocate(17);
  auto runner = make_model_runner(m, parallel::TensorParallelContext::single_process());
  GenerationOptions o;
  o.sampling.tokens_to_generate = 5;
  o.sampling.top_p = 0.9f;
  o.sampling.random_seed = 21;
  o.return_logprobs = true;
  const std::vector<std::vector<int32_t>> prompts = {{2, 7, 1, 8}, {5}, {9, 9, 3}};
  const std::vector<Generation> together = generate(*runner, prompts, o);
  ASSERT_EQ(together.size(), 3u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    // Alone at the same index: the prompts before it, generating nothing, keep the sampling keys.
    std::vector<std::vector<int32_t>> upto(prompts.begin(), prompts.begin() + i + 1);
    const Generation alone = generate(*runner, upto, o, nullptr, {}, 1)[i];
    EXPECT_EQ(together[i].tokens, alone.tokens) << "prompt " << i;
    ASSERT_EQ(together[i].logprobs.size(), alone.logprobs.size());
    ASSERT_EQ(alone.logprobs.size(), together[i].tokens.size() - 1);
    for (size_t t = 0; t < alone.logprobs.size(); ++t) EXPECT_NEAR(together[i].logprobs[t], alone.logprobs[t], 1e-5);
  }
}

TEST(Score, LabelLogprobsAndArgmaxMatchDecoding) {
  model::ModelConfig c = tiny_config();
  model::ParameterSet params;
  model::GptModel m(c, params);
  params.allocate(13);
  auto runner = make_model_runner(m, parallel::TensorParallelContext::single_process());
  // Two samples of 4 positions.
  std::vector<std::vector<int32_t>> seqs = {{1, 5, 9, 2, 7}, {3, 3, 8, 0, 4}};
  model::MicroBatch mb;
  mb.tokens = Tensor::empty({2, 4}, DType::I32);
  mb.labels = Tensor::empty({2, 4}, DType::I32);
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 4; ++t) {
      mb.tokens.i32()[b * 4 + t] = seqs[b][t];
      mb.labels.i32()[b * 4 + t] = seqs[b][t + 1];
    }
  Scores s = runner->score(mb);
  for (int b = 0; b < 2; ++b) {
    DecodeSequence seq = runner->start(8);
    for (int t = 0; t < 4; ++t) {
      Tensor logits = runner->next_token_logits({seqs[b][t]}, seq);
      EXPECT_NEAR(s.label_logprob[b * 4 + t], token_logprob(logits, seqs[b][t + 1]), 1e-4);
      const float* l = logits.f32();
      EXPECT_EQ(s.argmax[b * 4 + t], std::max_element(l, l + c.padded_vocab_size) - l);
    }
  }
}

// Decoding as SentencePiece does: "_" is a space, and a text's first space is dropped.
class PieceTokenizer : public data::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (int32_t id : ids)
      for (char c : pieces_.at(static_cast<size_t>(id))) text += c == '_' ? ' ' : c;
    return !text.empty() && text[0] == ' ' ? text.substr(1) : text;
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  int32_t eod() const override { return 0; }
  std::string_view name() const override { return "PieceTokenizer"; }

 private:
  std::vector<std::string> pieces_{"<eod>", "_In", "_the", "_morning", ",", "_tired"};
};

TEST(ContinuationText, KeepsTheSpaceThatDecodingTheNewTokensAloneDrops) {
  PieceTokenizer pieces;
  const std::vector<int32_t> prompt{1, 2, 3, 4}, generated{2, 5};
  EXPECT_EQ(pieces.decode(generated), "the tired");
  EXPECT_EQ(continuation_text(pieces, prompt, generated), " the tired");
  EXPECT_EQ(continuation_text(pieces, prompt, {}), "");
  // Ids are separated by spaces only between them.
  data::NullTokenizer ids(10);
  EXPECT_EQ(continuation_text(ids, std::vector<int32_t>{3, 5}, std::vector<int32_t>{7, 1}), " 7 1");
}

}  // namespace
}  // namespace tessera::infer
