// Text generation by incremental decoding: the prompt fills the key/value caches once, then each new
// token costs one step over a single position (of every sequence decoded together). Sampling is greedy, or by temperature with top-k and
// top-p filtering, drawing from Philox keyed by (random seed, prompt index, step) so a seed
// reproduces its output whatever the layout.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "infer/model_runner.h"

namespace tessera::infer {

struct SamplingOptions {
  int64_t tokens_to_generate = 32;
  float temperature = 1.0f;  // 0: greedy
  int64_t top_k = 0;         // 0: no top-k filter; 1: greedy
  float top_p = 0.0f;        // 0: no nucleus filter
  uint64_t random_seed = 0;
  int32_t eod = -1;          // stop after producing this id (-1: never)
};

// Checks the options; errors name Megatron's flags (--temperature, --top-k, --top-p, ...).
void validate(const SamplingOptions& options);

// The next token from logits over ids [0, vocab) (padding ids beyond vocab are never chosen). `key`
// selects the random number (generate uses prompt index << 32 | step).
int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& options, uint64_t key);

struct GenerationOptions {
  SamplingOptions sampling;
  bool return_logprobs = false;  // log-probability of every token after the first (prompt included)
  // false: of the generated tokens only (the prompt then goes in whole, not a token a step); logprobs[k]
  // is then the k-th generated token's.
  bool logprobs_of_prompt = true;
  // With return_logprobs: also the this many most likely ids at each of those positions (OpenAI's
  // `logprobs` = N, `top_logprobs`).
  int64_t top_logprobs = 0;
  // Megatron's stop_on_eol / stop_on_double_eol: stop after a generated newline token ("\n" or
  // "\n\n"), or after two newlines in a row; GPT-2's ids 198 and 628, found by their text so that any
  // tokenizer works. Needs the tokenizer.
  bool stop_on_eol = false;
  bool stop_on_double_eol = false;
  // Stop after the token that completes one of these strings in the generated text (needs the
  // tokenizer).
  std::vector<std::string> stop_strings;
  // Stop after generating one of these ids (a chat template's end of turn when it is a special token),
  // as after the end-of-document id.
  std::vector<int32_t> stop_ids;
};

struct Generation {
  std::vector<int32_t> tokens;  // the prompt followed by the generated tokens
  int64_t prompt_length = 0;
  std::vector<float> logprobs;  // logprobs[i] = log p(tokens[i + 1] | tokens[0..i]) when asked for
  // top_logprobs[i]: the options.top_logprobs most likely (id, log p) after tokens[0..i], most likely
  // first, when asked for.
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
};

// Throws when a prompt is empty or, with learned positions, its tokens and the tokens to generate do not
// fit the model's positions. generate() checks this first; a caller that prints prompts as it goes
// calls it before printing anything.
void check_prompts(const model::ModelConfig& config, const std::vector<std::vector<int32_t>>& prompts,
                   const SamplingOptions& sampling);

// Continues each prompt (ids) by up to tokens_to_generate tokens, stopping after the end-of-document
// id or a stop condition, calling on_token(prompt index, token) as each is produced. Up to
// max_batch_size prompts are decoded together, one forward step for all (infer/batch_decoder.h), the
// next prompt joining as one finishes; each prompt's tokens are what it would get alone. Every rank of
// the model group calls it with the same arguments; the tokens are those of the runner's deciding rank.
std::vector<Generation> generate(const ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerationOptions& options, const data::Tokenizer* tokenizer = nullptr,
                                 const std::function<void(size_t, int32_t)>& on_token = {},
                                 int64_t max_batch_size = 64);

// The log-probabilities of `logits` over the padded vocabulary (as Megatron's log_softmax of the
// model's output) at `id`.
float token_logprob(const Tensor& logits, int32_t id);

// The `n` ids of [0, vocab) with the largest logits (padding ids are not tokens), most likely first and
// by ascending id among equals, with their log-probabilities as token_logprob gives them: bit for bit, so
// that a client comparing the chosen token's log-prob with the top one's (lm-evaluation-harness's
// is_greedy) sees equality exactly when the chosen token is the most likely.
std::vector<std::pair<int32_t, float>> top_token_logprobs(const Tensor& logits, int64_t vocab, int64_t n);

// The text `generated` adds after `prompt`: decode(prompt + generated) past decode(prompt). Decoding the
// new tokens alone would lose what depends on what precedes them: SentencePiece drops the space of a
// text's first piece ("▁tired" alone is "tired"), and ids print without their separating space.
std::string continuation_text(const data::Tokenizer& tokenizer, std::span<const int32_t> prompt,
                              std::span<const int32_t> generated);

}  // namespace tessera::infer
