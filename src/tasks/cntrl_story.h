// MEGATRON-CNTRL's story generation (Xu et al. 2020), sentence by sentence. For each new sentence of
// every story: the keyword predictor (a GPT fine-tuned with --task CNTRL-KEYWORDS) continues
// "story so far Keywords:", or the user's keywords replace its (the control); the knowledge base gives
// the sentences of the keywords' triples; the ranker (KnowledgeRanker) orders them against the story so
// far and keeps the top_n; the conditional generator (a GPT fine-tuned with --task CNTRL-GENERATOR)
// continues "Knowledge: ... Story: story so far" by one sentence. The text formats are
// tasks/cntrl_dataset.h.
//
// The stories advance together: each stage decodes every story's prompt in batches (infer::generate,
// which gives each prompt the tokens it would get alone). Sampling is keyed by (random_seed + 2 * step +
// stage, the prompt's place among the stage's prompts): a seed reproduces every story, at any
// --micro-batch-size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "infer/generator.h"
#include "infer/loaded_model.h"
#include "tasks/knowledge_base.h"
#include "tasks/knowledge_ranker.h"

namespace tessera::tasks {

struct StoryRequest {
  std::string first_sentence;
  // Per new sentence: the keywords to use instead of predicted ones (nullopt or past the end: predict).
  std::vector<std::optional<std::vector<std::string>>> keywords;
};

// One request per line of a JSONL file: {"context": "first sentence", "keywords": [["k", ...], null, ...]}
// ("keywords" optional; null: predict that sentence's). Errors name the file and line.
std::vector<StoryRequest> read_story_requests(const std::string& path);

struct StorySentence {
  std::vector<std::string> keywords;
  bool keywords_given = false;
  std::vector<std::string> knowledge;  // retrieved, in knowledge-base order
  std::vector<float> scores;           // the ranker's, of each retrieved sentence
  std::vector<std::string> ranked;     // the top_n by score, best first
  std::string sentence;
};

struct Story {
  std::string first_sentence;
  std::vector<StorySentence> sentences;
  std::string text() const;  // the sentences, space-separated
};

struct StoryOptions {
  int64_t sentences = 4;  // after the first (ROCStories: five in all)
  int64_t keywords_per_sentence = 3;
  int64_t knowledge_per_keyword = 5;
  int64_t top_n = 5;
  int64_t keyword_tokens = 16, sentence_tokens = 40;  // tokens to generate per stage
  infer::SamplingOptions sampling;  // tokens_to_generate and eod are set per stage
  int64_t max_batch_size = 64;
};

class StoryTeller {
 public:
  StoryTeller(const infer::LoadedModel& keyword_model, const infer::LoadedModel& generator_model,
              const KnowledgeRanker& ranker, const KnowledgeBase& kb, const StoryOptions& options);

  std::vector<Story> tell(const std::vector<StoryRequest>& requests) const;

 private:
  // The continuation of every prompt by `model`, up to `tokens` tokens, as text cut at the first newline.
  std::vector<std::string> continue_all(const infer::LoadedModel& model, const std::vector<std::string>& prompts,
                                        int64_t tokens, uint64_t seed) const;

  const infer::LoadedModel& keyword_model_;
  const infer::LoadedModel& generator_model_;
  const KnowledgeRanker& ranker_;
  const KnowledgeBase& kb_;
  StoryOptions options_;
};

// The automatic controllability measure: of the sentences for which `requests` give keywords, those
// containing one of them or a knowledge-base neighbour of one (as words, lower-cased). Measured on stories
// told with those keywords it is the control's success; on stories told from predicted keywords, the
// baseline it must rise above.
struct Controllability {
  int64_t controlled = 0, hits = 0;
};
Controllability controllability(const std::vector<Story>& stories, const std::vector<StoryRequest>& requests,
                                const KnowledgeBase& kb);
// Whether `sentence` contains `keyword` or one of its knowledge-base neighbours as a run of words.
bool mentions(const std::string& sentence, const std::string& keyword, const KnowledgeBase& kb);

}  // namespace tessera::tasks
