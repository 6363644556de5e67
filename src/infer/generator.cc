#include "infer/generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/philox.h"
#include "infer/batch_decoder.h"

namespace tessera::infer {

void validate(const SamplingOptions& o) {
  TESSERA_CHECK(o.tokens_to_generate >= 0, "--tokens-to-generate=", o.tokens_to_generate, ": must be >= 0");
  TESSERA_CHECK(o.temperature >= 0, "--temperature=", o.temperature, ": must be >= 0");
  TESSERA_CHECK(o.top_k >= 0, "--top-k=", o.top_k, ": must be >= 0");
  TESSERA_CHECK(o.top_p >= 0 && o.top_p <= 1, "--top-p=", o.top_p, ": must be in [0, 1]");
  TESSERA_CHECK(o.top_k == 0 || o.top_p == 0, "--top-k=", o.top_k, " and --top-p=", o.top_p,
                ": use one of them, as in Megatron");
}

namespace {

// Up to this top_k, the candidates are found in one pass (top_ids) rather than by sorting every id.
constexpr int64_t kSmallTopK = 256;

// The `keep` ids of largest logit, by descending logit and ascending id among equals: what a partial
// sort of all ids by that order puts first (the order is total, so the set and its order are the same).
// One pass keeps the best so far in a heap whose worst is at the front; a block of 64 logits none of
// which beats that worst (nearly all of a 50,000-id vocabulary once the heap is full) costs one
// vectorised maximum. Sorting all 50,257 ids of GPT-2 took 0.1 ms a row, most of a 32-sequence step's
// sampling (issue 40).
std::vector<int32_t> top_ids(const float* logits, int64_t vocab, int64_t keep) {
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::vector<int32_t> heap;
  heap.reserve(keep);
  constexpr int64_t kBlock = 64;
  for (int64_t start = 0; start < vocab; start += kBlock) {
    const int64_t end = std::min(vocab, start + kBlock);
    if (static_cast<int64_t>(heap.size()) == keep) {
      float block_max = -INFINITY;
#pragma omp simd reduction(max : block_max)
      for (int64_t i = start; i < end; ++i) block_max = logits[i] > block_max ? logits[i] : block_max;
      // Later ids lose ties, so a block can only enter with a logit above the worst kept one.
      if (!(block_max > logits[heap.front()]) && !std::isnan(block_max)) continue;
    }
    for (int64_t i = start; i < end; ++i) {
      const int32_t id = static_cast<int32_t>(i);
      if (static_cast<int64_t>(heap.size()) < keep) {
        heap.push_back(id);
        std::push_heap(heap.begin(), heap.end(), by_logit);
      } else if (by_logit(id, heap.front())) {
        std::pop_heap(heap.begin(), heap.end(), by_logit);
        heap.back() = id;
        std::push_heap(heap.begin(), heap.end(), by_logit);
      }
    }
  }
  std::sort_heap(heap.begin(), heap.end(), by_logit);
  return heap;
}

}  // namespace

int32_t sample_token(const float* logits, int64_t vocab, const SamplingOptions& o, uint64_t key) {
  if (o.temperature == 0 || o.top_k == 1)
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);

  // Candidates by descending logit (only as many as the filters can keep).
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int64_t keep = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  std::vector<int32_t> ids = keep <= kSmallTopK ? top_ids(logits, vocab, keep) : std::vector<int32_t>(vocab);
  if (keep > kSmallTopK) {
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_logit);
    ids.resize(keep);
  }

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

namespace {

// log_softmax over a row of logits, in double from fp32 logits; `at` is the one formula both
// token_logprob and top_token_logprobs use, so their values agree to the last bit.
struct LogSoftmax {
  explicit LogSoftmax(const Tensor& logits) : l(logits.host_f32()) {
    const int64_t n = logits.numel();
    max = *std::max_element(l, l + n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(l[i] - max));
    log_sum = std::log(sum);
  }
  float at(int32_t id) const { return static_cast<float>(l[id] - max - log_sum); }
  const float* l;
  float max;
  double log_sum;
};

}  // namespace

float token_logprob(const Tensor& logits, int32_t id) { return LogSoftmax(logits).at(id); }

std::vector<std::pair<int32_t, float>> top_token_logprobs(const Tensor& logits, int64_t vocab, int64_t n) {
  const LogSoftmax log_softmax(logits);
  std::vector<std::pair<int32_t, float>> out;
  for (int32_t id : top_ids(log_softmax.l, std::min(vocab, logits.numel()), std::min(n, vocab)))
    out.emplace_back(id, log_softmax.at(id));
  return out;
}

void check_prompts(const model::ModelConfig& c, const std::vector<std::vector<int32_t>>& prompts,
                   const SamplingOptions& sampling) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    TESSERA_CHECK(!prompts[i].empty(), "generate: prompt ", i, " is empty");
    const int64_t capacity = static_cast<int64_t>(prompts[i].size()) + sampling.tokens_to_generate;
    if (c.position_embedding == model::PositionEmbedding::LearnedAbsolute)
      TESSERA_CHECK(capacity <= c.max_position_embeddings, "prompt of ", prompts[i].size(),
                    " tokens + tokens to generate ", sampling.tokens_to_generate, " exceeds the model's ",
                    c.max_position_embeddings, " positions");
  }
}

std::vector<Generation> generate(const ModelRunner& runner, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerationOptions& options, const data::Tokenizer* tokenizer,
                                 const std::function<void(size_t, int32_t)>& on_token, int64_t max_batch_size) {
  validate(options.sampling);
  TESSERA_CHECK(max_batch_size > 0, "generate: at most ", max_batch_size, " prompts at once: must be > 0");
  check_prompts(runner.config(), prompts, options.sampling);
  const int64_t block_size = 16;
  std::vector<int64_t> blocks;  // each prompt's, for its whole generation
  for (const std::vector<int32_t>& prompt : prompts)
    blocks.push_back(KvBlockAllocator::blocks_for(
        static_cast<int64_t>(prompt.size()) + options.sampling.tokens_to_generate, block_size));
  std::vector<Generation> out(prompts.size());
  if (prompts.empty()) return out;
  // A pool for the largest prompts that can run together.
  std::vector<int64_t> largest = blocks;
  std::sort(largest.begin(), largest.end(), std::greater<>());
  largest.resize(std::min<size_t>(largest.size(), static_cast<size_t>(max_batch_size)));
  int64_t pool_blocks = 0;
  for (int64_t b : largest) pool_blocks += b;

  BatchDecoder decoder(runner, pool_blocks, block_size, tokenizer);
  const auto shared_options = std::make_shared<const GenerationOptions>(options);
  size_t next = 0;  // the next prompt to start; a sequence's id is its prompt index
  while (next < prompts.size() || decoder.active() > 0) {
    while (next < prompts.size() && decoder.active() < max_batch_size &&
           blocks[next] <= decoder.cache().free_blocks()) {
      decoder.add({prompts[next], shared_options, next});
      ++next;
    }
    auto report = [&](int64_t id, int32_t token) {
      if (on_token) on_token(static_cast<size_t>(id), token);
    };
    for (BatchDecoder::Finished& f : decoder.step(report)) out[f.id] = std::move(f.generation);
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
