#include "infer/generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/philox.h"

namespace tessera::infer {

void validate(const SamplingOptions& o) {
  TESSERA_CHECK(o.tokens_to_generate >= 0, "--tokens-to-generate=", o.tokens_to_generate, ": must be >= 0");
  TESSERA_CHECK(o.temperature >= 0, "--temperature=", o.temperature, ": must be >= 0");
  TESSERA_CHECK(o.top_k >= 0, "--top-k=", o.top_k, ": must be >= 0");
  TESSERA_CHECK(o.top_p >= 0 && o.top_p <= 1, "--top-p=", o.top_p, ": must be in [0, 1]");
  TESSERA_CHECK(o.top_k == 0 || o.top_p == 0, "--top-k=", o.top_k, " and --top-p=", o.top_p,
                ": use one of them, as in Megatron");
}

int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& o, uint64_t step) {
  if (o.temperature == 0 || o.top_k == 1)
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);

  // Candidates by descending logit (only as many as the filters can keep).
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int64_t keep = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_logit);
  ids.resize(keep);

  std::vector<double> p(keep);
  const double max = logits[ids[0]];
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) sum += p[i] = std::exp((logits[ids[i]] - max) / o.temperature);
  if (o.top_p > 0) {  // the smallest prefix whose probability reaches top_p
    double mass = 0;
    int64_t n = 0;
    while (n < keep && mass < o.top_p * sum) mass += p[n++];
    p.resize(n);
    sum = mass;
  }
  double u = PhiloxStream(o.random_seed, 0x73616d70).uniform(step) * sum;  // "samp"
  for (size_t i = 0; i < p.size(); ++i) {
    u -= p[i];
    if (u < 0) return ids[i];
  }
  return ids[p.size() - 1];
}

std::vector<int32_t> generate(const model::GptModel& model, const std::vector<int32_t>& prompt,
                              const SamplingOptions& options, const std::function<void(int32_t)>& on_token) {
  validate(options);
  TESSERA_CHECK(!prompt.empty(), "generate: the prompt is empty");
  const model::GptConfig& c = model.config();
  int64_t capacity = static_cast<int64_t>(prompt.size()) + options.tokens_to_generate;
  if (c.position_embedding == model::PositionEmbedding::LearnedAbsolute)
    TESSERA_CHECK(capacity <= c.max_position_embeddings, "prompt of ", prompt.size(), " tokens + --tokens-to-generate=",
                  options.tokens_to_generate, " exceeds the model's ", c.max_position_embeddings, " positions");
  model::DecodeState state = model.start_decoding(capacity);
  std::vector<int32_t> out;
  Tensor logits = model.next_token_logits(prompt, state);
  for (int64_t step = 0; step < options.tokens_to_generate; ++step) {
    int32_t token = sample_token(logits.f32(), c.vocab_size, options, static_cast<uint64_t>(step));
    out.push_back(token);
    if (on_token) on_token(token);
    if (token == options.eod || step + 1 == options.tokens_to_generate) break;
    logits = model.next_token_logits({token}, state);
  }
  return out;
}

}  // namespace tessera::infer
