// Batched decoding (infer/batch_decoder.h) under every model-parallel layout that fits the world: greedy
// output of prompts decoded together, joining as others finish, equals each prompt decoded alone with its
// own cache (the sequential decoding generate did before batching) and the single process's; a sampled
// sequence's tokens do not depend on what else is in the batch.
#include "infer/batch_decoder.h"

#include <gtest/gtest.h>

#include <map>

#include "comm/mpi_test_main.h"
#include "comm/parallel_state.h"
#include "model/gpt_model.h"

namespace tessera::infer {
namespace {

// GPT-2 style (learned positions, LayerNorm, GELU) or Llama style (RoPE, RMSNorm, SwiGLU); both with
// grouped-query attention. Or Llama style with DeepSeek-V3's Multi-Latent Attention (issue 53), whose
// cache holds compressed rows.
model::ModelConfig config(bool llama = false, bool mla = false) {
  model::ModelConfig c;
  c.num_layers = 4;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  c.kv_channels = 8;
  c.ffn_hidden_size = 64;
  c.seq_length = 64;
  c.max_position_embeddings = 64;
  c.vocab_size = 40;
  c.padded_vocab_size = 48;
  c.init_method_std = 0.4f;
  if (llama) {
    c.position_embedding = model::PositionEmbedding::Rope;
    c.normalization = model::Normalization::RMSNorm;
    c.swiglu = true;
  }
  if (mla) {
    c.num_query_groups = c.num_attention_heads;
    c.qk_layernorm = true;
    c.mla.enabled = true;
    c.mla.q_lora_rank = 12;
    c.mla.kv_lora_rank = 6;
    c.mla.qk_head_dim = 8;
    c.mla.qk_pos_emb_head_dim = 4;
    c.mla.v_head_dim = 6;
    c.mla.rotary_scaling_factor = 4;
    c.mla.mscale_all_dim = 1;
    c.mla.original_max_position_embeddings = 16;
  }
  return c;
}

// A model split over `state`'s tensor and pipeline groups, and its runner.
struct Model {
  Model(const model::ModelConfig& c, comm::ParallelState& state)
      : tp{&state.tensor_group(), false, nullptr} {
    const int pp = state.pipeline_group().size(), stage = state.pipeline_group().rank();
    const int64_t per_stage = c.num_layers / pp;
    model = std::make_unique<model::GptModel>(c, params, tp,
                                              model::ModelChunk{stage * per_stage, per_stage, stage == 0, stage == pp - 1});
    params.allocate(2024);
    runner = make_model_runner(*model, tp, &state.pipeline_group());
  }
  parallel::TensorParallelContext tp;
  model::ParameterSet params;
  std::unique_ptr<model::GptModel> model;
  std::unique_ptr<ModelRunner> runner;
};

const std::vector<std::vector<int32_t>> kPrompts = {{1, 2, 3, 4, 5, 6, 7}, {9}, {4, 4, 2}, {30, 1, 22, 5, 17, 8, 8, 3, 2, 11, 39}, {6, 6}};

// Each prompt alone, its cache one contiguous block, fed whole and then token by token.
std::vector<std::vector<int32_t>> sequential_greedy(const ModelRunner& runner, int64_t tokens) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& prompt : kPrompts) {
    DecodeSequence seq = runner.start(static_cast<int64_t>(prompt.size()) + tokens);
    std::vector<int32_t> all = prompt;
    Tensor logits = runner.next_token_logits(prompt, seq);
    SamplingOptions greedy;
    greedy.temperature = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<int32_t> next = {sample_token(logits.f32(), runner.config().vocab_size, greedy, 0)};
      runner.agree(next);
      all.push_back(next[0]);
      if (t + 1 < tokens) logits = runner.next_token_logits(next, seq);
    }
    out.push_back(all);
  }
  return out;
}

struct Layout {
  int tp, pp;
};

std::vector<Layout> layouts(int world, const model::ModelConfig& c) {
  std::vector<Layout> out;
  for (Layout l : {Layout{1, 1}, Layout{2, 1}, Layout{1, 2}, Layout{2, 2}, Layout{1, 4}})
    if (world % (l.tp * l.pp) == 0 && c.num_query_groups % l.tp == 0 && c.num_layers % l.pp == 0) out.push_back(l);
  return out;
}

class GreedyBatches : public ::testing::TestWithParam<int> {};  // 0: GPT-2, 1: Llama, 2: MLA

TEST_P(GreedyBatches, EqualSequentialDecodingInEveryLayout) {
  const model::ModelConfig c = config(GetParam() > 0, GetParam() == 2);
  const int64_t tokens = 12;
  auto single = comm::ParallelState::single_process();
  const std::vector<std::vector<int32_t>> reference = sequential_greedy(*Model(c, *single).runner, tokens);
  auto world = comm::make_mpi_world_group();
  for (Layout l : layouts(world->size(), c)) {
    SCOPED_TRACE(str_cat("tp=", l.tp, " pp=", l.pp));
    comm::ParallelState state(*world, {world->size(), l.tp, l.pp});
    Model m(c, state);
    EXPECT_EQ(sequential_greedy(*m.runner, tokens), reference);
    GenerationOptions greedy;
    greedy.sampling.temperature = 0;
    greedy.sampling.tokens_to_generate = tokens;
    for (int64_t batch : {2, 5}) {  // 2: prompts join as others finish; 5: all at once
      std::vector<Generation> out = generate(*m.runner, kPrompts, greedy, nullptr, {}, batch);
      ASSERT_EQ(out.size(), kPrompts.size());
      for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].tokens, reference[i]) << "prompt " << i << ", batch " << batch;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GreedyBatches, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(info.param == 0 ? "gpt2" : info.param == 1 ? "llama" : "mla");
                         });

// Runs `target` (added after `before` steps) to the end beside other sequences joining and leaving.
std::vector<int32_t> sampled_in_company(const ModelRunner& runner, const SequenceRequest& target, int64_t before,
                                        const std::vector<SequenceRequest>& others) {
  BatchDecoder decoder(runner, 64, 4);
  for (const SequenceRequest& o : others) decoder.add(o);
  for (int64_t s = 0; s < before; ++s) decoder.step();
  const int64_t id = decoder.add(target);
  for (;;)
    for (BatchDecoder::Finished& f : decoder.step())
      if (f.id == id) return f.generation.tokens;
}

TEST(BatchDecoding, SampledTokensDoNotDependOnTheBatch) {
  const model::ModelConfig c = config();
  auto world = comm::make_mpi_world_group();
  for (Layout l : layouts(world->size(), c)) {
    SCOPED_TRACE(str_cat("tp=", l.tp, " pp=", l.pp));
    comm::ParallelState state(*world, {world->size(), l.tp, l.pp});
    Model m(c, state);
    auto options = [](int64_t tokens, uint64_t seed) {
      auto o = std::make_shared<GenerationOptions>();
      o->sampling.tokens_to_generate = tokens;
      o->sampling.top_k = 8;
      o->sampling.random_seed = seed;
      return o;
    };
    const SequenceRequest target{{5, 9, 13, 2}, options(14, 77), 3};
    const std::vector<int32_t> alone = sampled_in_company(*m.runner, target, 0, {});
    EXPECT_EQ(alone.size(), 18u);
    // Others with other seeds and lengths, before it and beside it; one wants log-probabilities.
    auto with_logprobs = options(3, 5);
    with_logprobs->return_logprobs = true;
    const std::vector<SequenceRequest> others = {{{1, 2, 3}, options(20, 1), 0},
                                                 {{7}, options(2, 2), 1},
                                                 {{8, 8, 8, 8, 8, 8, 8, 8, 8}, with_logprobs, 0}};
    EXPECT_EQ(sampled_in_company(*m.runner, target, 0, others), alone);
    EXPECT_EQ(sampled_in_company(*m.runner, target, 3, others), alone);
  }
}

// Requests sharing a prefix, as a multiple-choice evaluation (one context, several endings) and a chat
// server (one system prompt, several questions) send them: the first alone, then the rest together, two
// of them joining a step later; one of them wants its prompt's log-probabilities. Returns each one's
// generation, and the prompt tokens read from the cache.
// With `max_step_tokens`, prompts are prefilled in chunks (chunked prefill).
std::vector<Generation> shared_prefix_traffic(const ModelRunner& runner, bool prefix_caching, int64_t& cached,
                                              int64_t max_step_tokens = 0) {
  std::vector<int32_t> context;
  for (int32_t t = 0; t < 13; ++t) context.push_back((7 * t + 3) % 37 + 1);
  const std::vector<int32_t> system = {2, 4, 6, 8, 10, 12, 14, 16};
  std::vector<std::vector<int32_t>> prompts;
  for (const std::vector<int32_t>& ending : std::vector<std::vector<int32_t>>{{1}, {2, 3}, {4, 5, 6}, {7, 8, 9, 10}}) {
    prompts.push_back(context);
    prompts.back().insert(prompts.back().end(), ending.begin(), ending.end());
  }
  for (const std::vector<int32_t>& question : std::vector<std::vector<int32_t>>{{20, 21}, {22}, {23, 24, 25, 26, 27}}) {
    prompts.push_back(system);
    prompts.back().insert(prompts.back().end(), question.begin(), question.end());
  }
  // The context's 3 whole blocks again: all cached, so its last block is prefilled again (for its logits).
  prompts.emplace_back(context.begin(), context.begin() + 12);
  auto greedy = std::make_shared<GenerationOptions>();
  greedy->sampling.temperature = 0;
  greedy->sampling.tokens_to_generate = 6;
  greedy->return_logprobs = true;
  greedy->logprobs_of_prompt = false;
  greedy->top_logprobs = 3;
  auto echo = std::make_shared<GenerationOptions>(*greedy);
  echo->logprobs_of_prompt = true;
  BatchDecoder decoder(runner, 64, 4, nullptr, prefix_caching, max_step_tokens);
  std::vector<Generation> out(prompts.size() + 1);
  auto run = [&] {
    for (BatchDecoder::Finished& f : decoder.step()) out[static_cast<size_t>(f.id)] = std::move(f.generation);
  };
  decoder.add({prompts[0], greedy, 0});
  while (decoder.active() > 0) run();
  for (size_t i = 1; i + 2 < prompts.size(); ++i) decoder.add({prompts[i], greedy, i});
  run();
  decoder.add({prompts[prompts.size() - 2], greedy, 0});
  decoder.add({prompts.back(), greedy, 0});
  decoder.add({prompts[1], echo, 0});  // the prompt's log-probabilities: fed a token a step, not from the cache
  while (decoder.active() > 0) run();
  cached = decoder.prefix_stats().cached_tokens;
  return out;
}

// The same tokens, and log-probs (with the top ones) equal to `tolerance`.
void expect_same_generations(const std::vector<Generation>& on, const std::vector<Generation>& off,
                             float tolerance = 1e-5f) {
  ASSERT_EQ(on.size(), off.size());
  for (size_t i = 0; i < on.size(); ++i) {
    SCOPED_TRACE(str_cat("sequence ", i));
    EXPECT_EQ(on[i].tokens, off[i].tokens);
    ASSERT_EQ(on[i].logprobs.size(), off[i].logprobs.size());
    for (size_t k = 0; k < on[i].logprobs.size(); ++k) EXPECT_NEAR(on[i].logprobs[k], off[i].logprobs[k], tolerance);
    ASSERT_EQ(on[i].top_logprobs.size(), off[i].top_logprobs.size());
    for (size_t k = 0; k < on[i].top_logprobs.size(); ++k)
      for (size_t j = 0; j < on[i].top_logprobs[k].size(); ++j) {
        EXPECT_EQ(on[i].top_logprobs[k][j].first, off[i].top_logprobs[k][j].first);
        EXPECT_NEAR(on[i].top_logprobs[k][j].second, off[i].top_logprobs[k][j].second, tolerance);
      }
  }
}

TEST(BatchDecoding, PrefixCachingChangesNoResultInAnyLayout) {
  const model::ModelConfig c = config(true);
  auto world = comm::make_mpi_world_group();
  for (Layout l : layouts(world->size(), c)) {
    SCOPED_TRACE(str_cat("tp=", l.tp, " pp=", l.pp));
    comm::ParallelState state(*world, {world->size(), l.tp, l.pp});
    Model m(c, state);
    int64_t cached_off = 0, cached_on = 0;
    const std::vector<Generation> off = shared_prefix_traffic(*m.runner, false, cached_off);
    const std::vector<Generation> on = shared_prefix_traffic(*m.runner, true, cached_on);
    EXPECT_EQ(cached_off, 0);
    // Blocks of 4: the context's 3 full blocks for each of the 3 later endings, the system prompt's 2 for
    // the question that joins after the first two were prefilled (those two start together: nothing is
    // cached yet), 2 of the 3 whole blocks sent again (the last one is prefilled), none for the echoed
    // prompt.
    EXPECT_EQ(cached_on, 3 * 4 * 3 + 2 * 4 + 2 * 4);
    expect_same_generations(on, off);
    EXPECT_EQ(on.back().logprobs.size(), on.back().tokens.size() - 1);  // the echoed prompt's, every position
  }
}

// Chunked prefill: prompts of up to 17 tokens fed in chunks of what a step of 3 or 7 tokens leaves beside
// the decoding sequences, with and without the prefix cache, give the tokens and log-probs (the echoed
// prompt's too) of prompts fed whole. Log-probs to 1e-4, as the cached decoding against recomputation
// (generator_test): a prompt's rows go through products and attention of other shapes, which round
// differently in fp32, and this model's large weights (std 0.4) make logits of tens (up to 3e-5 seen).
TEST(BatchDecoding, ChunkedPrefillChangesNoResultInAnyLayout) {
  const model::ModelConfig c = config(true);
  auto world = comm::make_mpi_world_group();
  for (Layout l : layouts(world->size(), c)) {
    SCOPED_TRACE(str_cat("tp=", l.tp, " pp=", l.pp));
    comm::ParallelState state(*world, {world->size(), l.tp, l.pp});
    Model m(c, state);
    int64_t cached = 0;
    const std::vector<Generation> whole = shared_prefix_traffic(*m.runner, false, cached);
    // (The cache's own equality is the test above; three mixes keep this one short at 8 ranks.)
    for (const auto& [prefix_caching, max_step_tokens] : {std::pair{false, 3}, {true, 3}, {true, 7}}) {
      SCOPED_TRACE(str_cat("prefix caching ", prefix_caching, ", at most ", max_step_tokens, " tokens a step"));
      expect_same_generations(shared_prefix_traffic(*m.runner, prefix_caching, cached, max_step_tokens), whole, 1e-4f);
    }
  }
}

// Two prompts joining a decoding sequence: every step still gives the decoding sequences their next
// tokens and feeds at most max_step_tokens (4) tokens in all, the prompts sharing what is left in the order
// they joined; chunks (3, 3, 3, 2 of 11 tokens; 1, 2, 2, 2 of 7) need not divide the prompts.
TEST(BatchDecoding, ChunkedPrefillKeepsTheOthersDecoding) {
  const model::ModelConfig c = config();
  auto world = comm::make_mpi_world_group();
  for (Layout l : layouts(world->size(), c)) {
    SCOPED_TRACE(str_cat("tp=", l.tp, " pp=", l.pp));
    comm::ParallelState state(*world, {world->size(), l.tp, l.pp});
    Model m(c, state);
    auto greedy = std::make_shared<GenerationOptions>();
    greedy->sampling.temperature = 0;
    greedy->sampling.tokens_to_generate = 12;
    const SequenceRequest running{{1, 2}, greedy, 0}, joining{kPrompts[3], greedy, 1}, third{kPrompts[0], greedy, 2};
    BatchDecoder decoder(*m.runner, 64, 4, nullptr, false, 4);
    const int64_t first = decoder.add(running);
    decoder.step();
    const int64_t second = decoder.add(joining);  // an 11-token prompt
    const int64_t last = decoder.add(third);      // a 7-token one
    std::vector<std::vector<int64_t>> sampled;    // the ids given a token, step by step
    std::vector<int64_t> fed;                     // the tokens each step fed
    std::map<int64_t, std::vector<int32_t>> tokens;
    while (decoder.active() > 0) {
      sampled.emplace_back();
      for (BatchDecoder::Finished& f : decoder.step([&](int64_t id, int32_t) { sampled.back().push_back(id); }))
        tokens[f.id] = f.generation.tokens;
      fed.push_back(decoder.last_step_tokens());
    }
    // Steps 1-3: the first sequence's token and 3 of the second's prompt; step 4: its last 2 (it samples)
    // and 1 of the third's; steps 5-7: two decoding, 2 of the third's (it samples at step 7).
    ASSERT_GE(sampled.size(), 7u);
    for (size_t s = 0; s < 7; ++s) {
      SCOPED_TRACE(str_cat("step ", s + 1));
      EXPECT_EQ(fed[s], 4);
      const std::vector<int64_t> expected = s < 3   ? std::vector<int64_t>{first}
                                            : s < 6 ? std::vector<int64_t>{first, second}
                                                    : std::vector<int64_t>{first, second, last};
      EXPECT_EQ(sampled[s], expected);
    }
    for (int64_t f : fed) EXPECT_LE(f, 4);
    // Their tokens are those of each alone, prompt fed whole.
    std::vector<Generation> alone =
        generate(*m.runner, {running.prompt, joining.prompt, third.prompt}, *greedy, nullptr, {}, 1);
    EXPECT_EQ(tokens[first], alone[0].tokens);
    EXPECT_EQ(tokens[second], alone[1].tokens);
    EXPECT_EQ(tokens[last], alone[2].tokens);
  }
}

}  // namespace
}  // namespace tessera::infer
