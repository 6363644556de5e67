#include "infer/batch_decoder.h"

#include <algorithm>
#include <limits>

#include "core/profiler.h"
#include "core/timer.h"
#include "kernels/parallel_grain.h"

namespace tessera::infer {
namespace {

// Whether generation of one sequence ends after its last token (Megatron's conditions, plus stop strings).
bool stops_after(const Generation& g, const GenerationOptions& o, const data::Tokenizer* tokenizer) {
  const int32_t token = g.tokens.back();
  if (token == o.sampling.eod) return true;
  if (std::find(o.stop_ids.begin(), o.stop_ids.end(), token) != o.stop_ids.end()) return true;
  if (o.stop_on_eol || o.stop_on_double_eol) {
    const std::string text = tokenizer->decode(std::span<const int32_t>(&token, 1));
    if (text == "\n\n") return true;
    if (text == "\n") {
      if (o.stop_on_eol) return true;
      const int32_t previous = g.tokens[g.tokens.size() - 2];
      if (tokenizer->decode(std::span<const int32_t>(&previous, 1)) == "\n") return true;
    }
  }
  if (!o.stop_strings.empty()) {
    std::span<const int32_t> generated(g.tokens.data() + g.prompt_length, g.tokens.size() - g.prompt_length);
    const std::string text = tokenizer->decode(generated);
    for (const std::string& s : o.stop_strings)
      if (!s.empty() && text.find(s) != std::string::npos) return true;
  }
  return false;
}

// Appends the log-probability of `id` after the row's position (and the top ones when asked for).
void record_logprobs(Generation& g, const Tensor& row, int32_t id, const GenerationOptions& o, int64_t vocab) {
  g.logprobs.push_back(token_logprob(row, id));
  if (o.top_logprobs > 0) g.top_logprobs.push_back(top_token_logprobs(row, vocab, o.top_logprobs));
}

}  // namespace

struct BatchDecoder::Sequence {
  int64_t id;
  SequenceRequest request;
  Generation generation;
  std::vector<int32_t> blocks;
  int64_t fed = 0;  // tokens in the cache
  // The prefix hashes of its first full blocks (read from the prefix cache, or filled and published).
  std::vector<uint64_t> hashes;
};

BatchDecoder::BatchDecoder(const ModelRunner& runner, int64_t blocks, int64_t block_size,
                           const data::Tokenizer* tokenizer, bool prefix_caching, int64_t max_step_tokens)
    : runner_(runner),
      tokenizer_(tokenizer),
      blocks_(blocks, block_size, prefix_caching),
      pool_(runner.make_kv_pool(blocks, block_size)),
      max_step_tokens_(max_step_tokens) {
  TESSERA_CHECK(max_step_tokens >= 0, "BatchDecoder: max_step_tokens ", max_step_tokens, " is negative");
}

BatchDecoder::~BatchDecoder() = default;

int64_t BatchDecoder::blocks_needed(int64_t prompt_length, const SamplingOptions& sampling) const {
  return KvBlockAllocator::blocks_for(prompt_length + sampling.tokens_to_generate, blocks_.block_size());
}

int64_t BatchDecoder::add(SequenceRequest request) {
  const GenerationOptions& o = *request.options;
  validate(o.sampling);
  TESSERA_CHECK(tokenizer_ != nullptr || (!o.stop_on_eol && !o.stop_on_double_eol && o.stop_strings.empty()),
                "generate: stop_on_eol, stop_on_double_eol and stop strings need the tokenizer");
  TESSERA_CHECK(!request.prompt.empty(), "generate: prompt ", request.prompt_index, " is empty");
  const int64_t prompt_length = static_cast<int64_t>(request.prompt.size());
  const int64_t needed = blocks_needed(prompt_length, o.sampling);
  auto s = std::make_unique<Sequence>();
  s->id = next_id_++;
  s->generation.tokens = request.prompt;
  s->generation.prompt_length = prompt_length;
  s->request = std::move(request);
  // Cached full blocks of the prompt, leaving at least its last token to prefill (whose logits are sampled);
  // the first position not cached starts a fresh block, so a shared block is never written.
  if (blocks_.enabled() && !(o.return_logprobs && o.logprobs_of_prompt)) {
    s->blocks = blocks_.acquire_prefix(s->generation.tokens, (prompt_length - 1) / blocks_.block_size(), s->hashes);
    s->fed = static_cast<int64_t>(s->blocks.size()) * blocks_.block_size();
    prefix_stats_.queried_tokens += prompt_length;
    prefix_stats_.cached_tokens += s->fed;
  }
  try {
    const std::vector<int32_t> fresh = blocks_.take(needed - static_cast<int64_t>(s->blocks.size()));
    s->blocks.insert(s->blocks.end(), fresh.begin(), fresh.end());
  } catch (const Error&) {
    blocks_.release(s->blocks);
    throw;
  }
  sequences_.push_back(std::move(s));
  return sequences_.back()->id;
}

bool BatchDecoder::cancel(int64_t id) {
  const auto found = std::find_if(sequences_.begin(), sequences_.end(), [&](const auto& s) { return s->id == id; });
  if (found == sequences_.end()) return false;
  blocks_.release((*found)->blocks);
  sequences_.erase(found);
  return true;
}

void BatchDecoder::publish_full_blocks(Sequence& s) {
  if (!blocks_.enabled()) return;
  const int64_t size = blocks_.block_size();
  for (int64_t b = static_cast<int64_t>(s.hashes.size()); (b + 1) * size <= s.fed; ++b) {
    const uint64_t parent = b == 0 ? PrefixCache::kRootHash : s.hashes.back();
    s.hashes.push_back(blocks_.publish(s.blocks[static_cast<size_t>(b)], parent,
                                       std::span<const int32_t>(s.generation.tokens).subspan(
                                           static_cast<size_t>(b * size), static_cast<size_t>(size))));
  }
}

std::vector<BatchDecoder::Finished> BatchDecoder::step(const std::function<void(int64_t, int32_t)>& on_token) {
  std::vector<Finished> finished;
  last_step_tokens_ = 0;
  last_step_timing_ = {};
  if (sequences_.empty()) return finished;
  const Timer step_timer;
  // What each sequence feeds: its prompt (one token at a time when it wants the prompt's
  // log-probabilities, which need the logits after every token), then its last sampled token. Under
  // chunked prefill the decoding sequences come first, and the prompts share what is left of the step's
  // tokens in the order they were added (a sequence given nothing sits this step out: row -1).
  int64_t prompt_budget = std::numeric_limits<int64_t>::max();
  if (max_step_tokens_ > 0) {
    int64_t decoding = 0;
    for (const auto& s : sequences_) decoding += s->fed >= s->generation.prompt_length ? 1 : 0;
    prompt_budget = std::max<int64_t>(0, max_step_tokens_ - decoding);
  }
  std::vector<model::DecodeStep> steps;
  std::vector<int64_t> row(sequences_.size(), -1);
  for (size_t i = 0; i < sequences_.size(); ++i) {
    const Sequence& s = *sequences_[i];
    const std::vector<int32_t>& tokens = s.generation.tokens;
    const int64_t prompt_length = s.generation.prompt_length;
    model::DecodeStep step{{}, s.fed, s.blocks};
    if (s.fed < prompt_length) {
      const GenerationOptions& o = *s.request.options;
      const bool token_by_token = o.return_logprobs && o.logprobs_of_prompt;
      const int64_t chunk = std::min(token_by_token ? 1 : prompt_length - s.fed, prompt_budget);
      if (chunk == 0) continue;
      prompt_budget -= chunk;
      step.tokens.assign(tokens.begin() + s.fed, tokens.begin() + s.fed + chunk);
    } else {
      step.tokens = {tokens.back()};
    }
    row[i] = static_cast<int64_t>(steps.size());
    last_step_tokens_ += static_cast<int64_t>(step.tokens.size());
    steps.push_back(std::move(step));
  }
  const Timer model_timer;
  const Tensor logits = runner_.decode_step(steps, pool_);
  last_step_timing_.model_seconds = model_timer.seconds();
  const int64_t vocab = runner_.config().vocab_size;

  // Sample the sequences that have read their prompt; the deciding rank's tokens for all of them at once.
  TESSERA_PROFILE_SCOPE("sampling");
  std::vector<size_t> sampling;
  std::vector<uint64_t> keys;
  std::vector<int32_t> sampled;
  std::vector<bool> done(sequences_.size(), false);
  for (size_t i = 0; i < sequences_.size(); ++i) {
    if (row[i] < 0) continue;  // its prompt waits for a later step
    Sequence& s = *sequences_[i];
    const GenerationOptions& o = *s.request.options;
    Generation& g = s.generation;
    s.fed += static_cast<int64_t>(steps[static_cast<size_t>(row[i])].tokens.size());
    publish_full_blocks(s);
    if (s.fed < g.prompt_length) {  // still reading the prompt: a token a step for its log-probs, or a chunk
      if (o.return_logprobs && o.logprobs_of_prompt)
        record_logprobs(g, logits.narrow(row[i], 1), g.tokens[s.fed], o, vocab);
      continue;
    }
    const int64_t generated = static_cast<int64_t>(g.tokens.size()) - g.prompt_length;
    if (generated == o.sampling.tokens_to_generate) {  // nothing to generate: the prompt was all
      done[i] = true;
      continue;
    }
    sampling.push_back(i);
    keys.push_back((s.request.prompt_index << 32) | static_cast<uint64_t>(generated));
  }
  // Each row's token depends only on its logits, options and key, so the rows are sampled in parallel
  // (a 32-sequence step spent 0.9 ms sampling one row after another; issue 40).
  sampled.resize(sampling.size());
  const int64_t rows = static_cast<int64_t>(sampling.size());
#pragma omp parallel for schedule(dynamic) if (parallel : rows > 1 && kernels::parallel_worth(rows * vocab))
  for (int64_t j = 0; j < rows; ++j) {
    const size_t i = sampling[static_cast<size_t>(j)];
    sampled[static_cast<size_t>(j)] = sample_token(logits.narrow(row[i], 1).host_f32(), vocab,
                                                   sequences_[i]->request.options->sampling, keys[static_cast<size_t>(j)]);
  }
  runner_.agree(sampled);
  for (size_t j = 0; j < sampling.size(); ++j) {
    const size_t i = sampling[j];
    Sequence& s = *sequences_[i];
    const GenerationOptions& o = *s.request.options;
    Generation& g = s.generation;
    g.tokens.push_back(sampled[j]);
    if (o.return_logprobs) record_logprobs(g, logits.narrow(row[i], 1), sampled[j], o, vocab);
    if (on_token) on_token(s.id, sampled[j]);
    const int64_t generated = static_cast<int64_t>(g.tokens.size()) - g.prompt_length;
    done[i] = generated == o.sampling.tokens_to_generate || stops_after(g, o, tokenizer_);
  }

  std::vector<std::unique_ptr<Sequence>> running;
  for (size_t i = 0; i < sequences_.size(); ++i) {
    if (!done[i]) {
      running.push_back(std::move(sequences_[i]));
      continue;
    }
    blocks_.release(sequences_[i]->blocks);
    finished.push_back({sequences_[i]->id, std::move(sequences_[i]->generation)});
  }
  sequences_ = std::move(running);
  last_step_timing_.step_seconds = step_timer.seconds();
  return finished;
}

}  // namespace tessera::infer
