// RAKE, Rapid Automatic Keyword Extraction (Rose et al. 2010), which MEGATRON-CNTRL uses to label each
// story sentence with its keywords. Candidate phrases are the runs of words between stopwords (NLTK's
// English list) and punctuation, lower-cased; a word scores its degree over its frequency (degree: the
// summed lengths of the candidates it occurs in), a phrase the sum of its words' scores. As rake-nltk.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::tasks {

struct ScoredPhrase {
  std::string phrase;
  double score = 0;
};

// The distinct candidate phrases of `text` (at most `max_words` words each; longer runs are not
// candidates, as rake-nltk's max_length), best first; equal scores keep their order in the text.
std::vector<ScoredPhrase> rake(const std::string& text, int64_t max_words = 3);

// The `count` best phrases (all when fewer).
std::vector<std::string> rake_keywords(const std::string& text, int64_t count, int64_t max_words = 3);

bool is_english_stopword(const std::string& lower_case_word);

}  // namespace tessera::tasks
