// MEGATRON-CNTRL (Xu et al. 2020), controllable story generation with external knowledge: the training
// data of its three learned stages, made from a story set and a knowledge base. For each sentence i >= 1
// of a story: the keywords of sentence i (RAKE, tasks/rake.h), the knowledge retrieved for them
// (tasks/knowledge_base.h), weak labels for the ranker (the knowledge sentences most similar to sentence
// i; the paper uses Universal Sentence Encoder embeddings, here TF-IDF cosine, tasks/tfidf.h), and the top
// knowledge the conditional generator is trained with.
//
// JSONL formats, one line per (story, sentence i):
//   keywords:  {"context": "s_1 ... s_{i-1}", "keywords": ["k", ...]}
//   ranker:    {"context": ..., "knowledge": ["sentence", ...], "pseudo_labels": [1, 0, ...]}
//   generator: {"context": ..., "knowledge_topN": ["sentence", ...], "target": "s_i"}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tasks/knowledge_base.h"

namespace tessera::tasks {

// ROCStories' CSV (storyid, storytitle, sentence1, ..., sentence5; a header line), quoted fields as RFC
// 4180: each story's sentences. An Error names the file and line of a row without sentences.
std::vector<std::vector<std::string>> read_rocstories(const std::string& path);

struct CntrlOptions {
  int64_t keywords_per_sentence = 3;  // RAKE phrases of each target sentence
  int64_t knowledge_per_keyword = 5;  // retrieved sentences per keyword
  int64_t top_n = 5;                  // knowledge given to the generator
  int64_t positives = 1;              // ranker pseudo-labels set to 1
};

struct CntrlExample {
  std::string context, target;
  std::vector<std::string> keywords, knowledge;
  std::vector<double> similarity;      // of each knowledge sentence to the target
  std::vector<int> pseudo_labels;      // 1 for the `positives` most similar (ties: retrieval order)
  std::vector<std::string> knowledge_top;  // the top_n by similarity, most similar first
};

std::vector<CntrlExample> cntrl_examples(const std::vector<std::vector<std::string>>& stories, const KnowledgeBase& kb,
                                         const CntrlOptions& options);

}  // namespace tessera::tasks
