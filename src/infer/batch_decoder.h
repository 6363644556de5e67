// Decoding many sequences together (continuous batching): every step runs one forward over the next
// tokens of every active sequence, each with its key/value cache in blocks of one shared pool, and
// sequences join between steps and leave as soon as they finish. A sequence's output does not depend on
// what else is in the batch: its sampling is keyed by its own (seed, prompt index, step), as generate's.
//
// Every rank of the model group makes the same calls in the same order (a step holds the group's
// collectives); the tokens are those of the runner's deciding rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "infer/generator.h"
#include "infer/kv_block_allocator.h"
#include "infer/prefix_cache.h"

namespace tessera::infer {

// One sequence to generate.
struct SequenceRequest {
  std::vector<int32_t> prompt;
  std::shared_ptr<const GenerationOptions> options;  // shared by the sequences of one request
  uint64_t prompt_index = 0;                         // keys its sampling (prompt index << 32 | step)
};

class BatchDecoder {
 public:
  // The sequences' caches in `blocks` blocks of `block_size` positions (how many sequences run at once is
  // the caller's choice, bounded by the blocks). With `prefix_caching`, full blocks are shared between
  // sequences with the same prefix (infer/prefix_cache.h): a sequence joining with a prompt whose first
  // full blocks are cached prefills only the rest (at least its last token, whose logits it samples
  // from). A sequence that wants its prompt's log-probabilities reads nothing from the cache (it needs
  // the logits after every prompt token), though what it computes is cached for others.
  //
  // With `max_step_tokens` > 0 (chunked prefill), a step feeds the next token of every sequence that has
  // read its prompt and, from the rest in the order they were added, prompt chunks of at most what is
  // left of `max_step_tokens`: a long prompt is read over several steps while the others keep decoding,
  // rather than stalling them for one long step. A sequence's results do not change (its keys and values
  // are the same whatever the chunks). 0: every prompt is fed whole in the step after it is added.
  BatchDecoder(const ModelRunner& runner, int64_t blocks, int64_t block_size, const data::Tokenizer* tokenizer = nullptr,
               bool prefix_caching = false, int64_t max_step_tokens = 0);
  ~BatchDecoder();

  // The cache blocks a sequence of this prompt length and sampling needs for its whole generation.
  int64_t blocks_needed(int64_t prompt_length, const SamplingOptions& sampling) const;
  const PrefixCache& cache() const { return blocks_; }
  // Prompt tokens of the sequences added that looked in the prefix cache, and those found there (their
  // prefill skipped), since the decoder was made.
  struct PrefixStats {
    int64_t queried_tokens = 0, cached_tokens = 0;
  };
  const PrefixStats& prefix_stats() const { return prefix_stats_; }
  int64_t active() const { return static_cast<int64_t>(sequences_.size()); }
  // Tokens fed by the last step (prompt chunks and last sampled tokens); tests check the budget with it.
  int64_t last_step_tokens() const { return last_step_tokens_; }
  // Wall time of the last step's model forward (ModelRunner::decode_step) and of the whole step, so that
  // the server can tell the model's cost from the rest of its loop (its closing line's step timing).
  struct StepTiming {
    double model_seconds = 0, step_seconds = 0;
  };
  const StepTiming& last_step_timing() const { return last_step_timing_; }

  // Adds a sequence (an Error when its blocks are not free); returns its id (0, 1, ... in order of adding).
  int64_t add(SequenceRequest request);

  // Drops a sequence before it finishes (its client went away): its cache blocks are free at once. Every
  // rank of the model group cancels the same ids between the same steps. False when `id` is not active.
  bool cancel(int64_t id);

  // One forward step over the active sequences: feeds each its prompt (all at once, a chunk of it under
  // max_step_tokens, or one token a step when it wants the prompt's log-probabilities) or its last token,
  // then samples the next token of those that have read their prompt, calling on_token(id, token).
  // Returns the sequences that finished, with their generations, and frees their caches.
  struct Finished {
    int64_t id;
    Generation generation;
  };
  std::vector<Finished> step(const std::function<void(int64_t, int32_t)>& on_token = {});

 private:
  struct Sequence;
  // Publishes the sequence's blocks that have filled up since the last step (prefix caching).
  void publish_full_blocks(Sequence& s);
  const ModelRunner& runner_;
  const data::Tokenizer* tokenizer_;
  PrefixCache blocks_;
  PrefixStats prefix_stats_;
  model::KvPool pool_;
  std::vector<std::unique_ptr<Sequence>> sequences_;
  int64_t next_id_ = 0;
  int64_t max_step_tokens_ = 0;
  int64_t last_step_tokens_ = 0;
  StepTiming last_step_timing_;
};

}  // namespace tessera::infer
