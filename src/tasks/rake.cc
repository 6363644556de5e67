#include "tasks/rake.h"

#include <algorithm>
#include <map>
#include <set>

namespace tessera::tasks {
namespace {

// NLTK's English stopword list (nltk_data corpora/stopwords/english, 179 words).
const std::set<std::string>& stopwords() {
  static const std::set<std::string> words = {
      "i", "me", "my", "myself", "we", "our", "ours", "ourselves", "you", "you're", "you've", "you'll", "you'd",
      "your", "yours", "yourself", "yourselves", "he", "him", "his", "himself", "she", "she's", "her", "hers",
      "herself", "it", "it's", "its", "itself", "they", "them", "their", "theirs", "themselves", "what", "which",
      "who", "whom", "this", "that", "that'll", "these", "those", "am", "is", "are", "was", "were", "be", "been",
      "being", "have", "has", "had", "having", "do", "does", "did", "doing", "a", "an", "the", "and", "but", "if",
      "or", "because", "as", "until", "while", "of", "at", "by", "for", "with", "about", "against", "between",
      "into", "through", "during", "before", "after", "above", "below", "to", "from", "up", "down", "in", "out",
      "on", "off", "over", "under", "again", "further", "then", "once", "here", "there", "when", "where", "why",
      "how", "all", "any", "both", "each", "few", "more", "most", "other", "some", "such", "no", "nor", "not",
      "only", "own", "same", "so", "than", "too", "very", "s", "t", "can", "will", "just", "don", "don't",
      "should", "should've", "now", "d", "ll", "m", "o", "re", "ve", "y", "ain", "aren", "aren't", "couldn",
      "couldn't", "didn", "didn't", "doesn", "doesn't", "hadn", "hadn't", "hasn", "hasn't", "haven", "haven't",
      "isn", "isn't", "ma", "mightn", "mightn't", "mustn", "mustn't", "needn", "needn't", "shan", "shan't",
      "shouldn", "shouldn't", "wasn", "wasn't", "weren", "weren't", "won", "won't", "wouldn", "wouldn't"};
  return words;
}

bool word_char(unsigned char c) { return std::isalnum(c) || c == '\'' || c >= 0x80; }

// Candidate phrases: runs of words, cut at stopwords and at anything that is not a word character
// (punctuation ends a phrase; spaces only separate words).
std::vector<std::vector<std::string>> candidates(const std::string& text) {
  std::vector<std::vector<std::string>> phrases(1);
  auto cut = [&] {
    if (!phrases.back().empty()) phrases.emplace_back();
  };
  std::string word;
  auto end_word = [&] {
    if (word.empty()) return;
    if (is_english_stopword(word)) cut(); else phrases.back().push_back(word);
    word.clear();
  };
  for (unsigned char c : text) {
    if (word_char(c)) {
      word += static_cast<char>(std::tolower(c));
    } else {
      end_word();
      if (!std::isspace(c)) cut();
    }
  }
  end_word();
  if (phrases.back().empty()) phrases.pop_back();
  return phrases;
}

}  // namespace

bool is_english_stopword(const std::string& w) { return stopwords().count(w) > 0; }

std::vector<ScoredPhrase> rake(const std::string& text, int64_t max_words) {
  std::vector<std::vector<std::string>> phrases;
  for (auto& p : candidates(text))
    if (static_cast<int64_t>(p.size()) <= max_words) phrases.push_back(std::move(p));
  std::map<std::string, double> frequency, degree;
  for (const auto& p : phrases)
    for (const std::string& w : p) {
      frequency[w] += 1;
      degree[w] += static_cast<double>(p.size());
    }
  std::vector<ScoredPhrase> out;
  std::set<std::string> seen;
  for (const auto& p : phrases) {
    ScoredPhrase s;
    for (const std::string& w : p) {
      s.phrase += (s.phrase.empty() ? "" : " ") + w;
      s.score += degree[w] / frequency[w];
    }
    if (seen.insert(s.phrase).second) out.push_back(std::move(s));
  }
  std::stable_sort(out.begin(), out.end(), [](const ScoredPhrase& a, const ScoredPhrase& b) { return a.score > b.score; });
  return out;
}

std::vector<std::string> rake_keywords(const std::string& text, int64_t count, int64_t max_words) {
  std::vector<std::string> out;
  for (const ScoredPhrase& p : rake(text, max_words)) {
    if (static_cast<int64_t>(out.size()) >= count) break;
    out.push_back(p.phrase);
  }
  return out;
}

}  // namespace tessera::tasks
