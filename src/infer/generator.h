// Text generation by incremental decoding: the prompt fills the key/value caches once, then each new
// token costs one step over a single position. Sampling is greedy, or by temperature with top-k and
// top-p filtering, drawing from Philox keyed by (random seed, step) so a seed reproduces its output.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/gpt_model.h"

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

// The next token from logits over ids [0, vocab) (padding ids beyond vocab are never chosen).
int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& options, uint64_t step);

// Generates up to options.tokens_to_generate tokens after `prompt` (stopping after eod), calling
// on_token with each as it is produced. Returns the generated tokens (without the prompt).
std::vector<int32_t> generate(const model::GptModel& model, const std::vector<int32_t>& prompt,
                              const SamplingOptions& options,
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace tessera::infer
