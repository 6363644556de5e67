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

int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& o, uint64_t key) {
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
  double u = PhiloxStream(o.random_seed, 0x73616d70).uniform(key) * sum;  // "samp"
  for (size_t i = 0; i < p.size(); ++i) {
    u -= p[i];
    if (u < 0) return ids[i];
  }
  return ids[p.size() - 1];
}

float token_logprob(const Tensor& logits, int32_t id) {
  const float* l = logits.f32();
  const int64_t n = logits.numel();
  const float max = *std::max_element(l, l + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(l[i] - max));
  return static_cast<float>(l[id] - max - std::log(sum));
}

namespace {

// Whether generation of one sequence ends after `token` (Megatron's conditions, plus stop strings).
class StopCondition {
 public:
  StopCondition(const GenerationOptions& o, const data::Tokenizer* tokenizer) : o_(o), tokenizer_(tokenizer) {
    TESSERA_CHECK(tokenizer != nullptr || (!o.stop_on_eol && !o.stop_on_double_eol && o.stop_strings.empty()),
                  "generate: stop_on_eol, stop_on_double_eol and stop strings need the tokenizer");
  }

  bool after(const Generation& g) const {
    int32_t token = g.tokens.back();
    if (token == o_.sampling.eod) return true;
    if (o_.stop_on_eol || o_.stop_on_double_eol) {
      std::string text = tokenizer_->decode(std::span<const int32_t>(&token, 1));
      if (text == "\n\n") return true;
      if (text == "\n") {
        if (o_.stop_on_eol) return true;
        int32_t previous = g.tokens[g.tokens.size() - 2];
        if (tokenizer_->decode(std::span<const int32_t>(&previous, 1)) == "\n") return true;
      }
    }
    if (!o_.stop_strings.empty()) {
      std::span<const int32_t> generated(g.tokens.data() + g.prompt_length, g.tokens.size() - g.prompt_length);
      std::string text = tokenizer_->decode(generated);
      for (const std::string& s : o_.stop_strings)
        if (!s.empty() && text.find(s) != std::string::npos) return true;
    }
    return false;
  }

 private:
  const GenerationOptions& o_;
  const data::Tokenizer* tokenizer_;
};

}  // namespace

std::vector<Generation> generate(const ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerationOptions& options, const data::Tokenizer* tokenizer,
                                 const std::function<void(size_t, int32_t)>& on_token) {
  const SamplingOptions& sampling = options.sampling;
  validate(sampling);
  StopCondition stop(options, tokenizer);
  const model::ModelConfig& c = runner.config();
  std::vector<Generation> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& prompt = prompts[i];
    TESSERA_CHECK(!prompt.empty(), "generate: prompt ", i, " is empty");
    int64_t capacity = static_cast<int64_t>(prompt.size()) + sampling.tokens_to_generate;
    if (c.position_embedding == model::PositionEmbedding::LearnedAbsolute)
      TESSERA_CHECK(capacity <= c.max_position_embeddings, "prompt of ", prompt.size(),
                    " tokens + tokens to generate ", sampling.tokens_to_generate, " exceeds the model's ",
                    c.max_position_embeddings, " positions");
    Generation& g = out[i];
    g.tokens = prompt;
    g.prompt_length = static_cast<int64_t>(prompt.size());
    DecodeSequence seq = runner.start(capacity);
    Tensor logits;
    if (options.return_logprobs) {  // the prompt one token at a time, for each token's probability
      for (size_t j = 0; j < prompt.size(); ++j) {
        if (j > 0) g.logprobs.push_back(token_logprob(logits, prompt[j]));
        logits = runner.next_token_logits({prompt[j]}, seq);
      }
    } else {
      logits = runner.next_token_logits(prompt, seq);
    }
    for (int64_t step = 0; step < sampling.tokens_to_generate; ++step) {
      uint64_t key = (static_cast<uint64_t>(i) << 32) | static_cast<uint64_t>(step);
      std::vector<int32_t> token = {sample_token(logits.f32(), c.vocab_size, sampling, key)};
      runner.agree(token);
      g.tokens.push_back(token[0]);
      if (options.return_logprobs) g.logprobs.push_back(token_logprob(logits, token[0]));
      if (on_token) on_token(i, token[0]);
      if (stop.after(g) || step + 1 == sampling.tokens_to_generate) break;
      logits = runner.next_token_logits(token, seq);
    }
  }
  return out;
}

std::string continuation_text(const data::Tokenizer& tokenizer, std::span<const int32_t> prompt,
                              std::span<const int32_t> generated) {
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  all.insert(all.end(), generated.begin(), generated.end());
  const std::string text = tokenizer.decode(all);
  const std::string before = tokenizer.decode(prompt);
  // A prompt ending inside a UTF-8 character decodes differently alone; then fall back to the new ids.
  if (text.compare(0, before.size(), before) != 0) return tokenizer.decode(generated);
  return text.substr(before.size());
}

}  // namespace tessera::infer
