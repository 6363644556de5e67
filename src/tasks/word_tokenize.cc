#include "tasks/word_tokenize.h"

#include <sstream>

#include "eval/python_regex.h"

namespace tessera::tasks {

using eval::regex_sub;

namespace {

// NLTK's TreebankWordTokenizer (the improved one word_tokenize uses) on one sentence.
std::vector<std::string> treebank(std::string s) {
  // starting quotes
  regex_sub(s, R"(^\")", "``");
  regex_sub(s, R"((``))", " $1 ");
  regex_sub(s, R"(([ \(\[{<])(\"|\'{2}))", "$1 `` ");
  // punctuation
  regex_sub(s, R"(([:,])([^\d]))", " $1 $2");
  regex_sub(s, R"(([:,])$)", " $1 ");
  regex_sub(s, R"(\.{2,})", " $0 ");
  regex_sub(s, R"([;@#$%&])", " $0 ");
  regex_sub(s, R"(([^\.])(\.)([\]\)}>"\']*)\s*$)", "$1 $2$3 ");
  regex_sub(s, R"([?!])", " $0 ");
  regex_sub(s, R"(([^'])' )", "$1 ' ");
  // brackets and dashes
  regex_sub(s, R"([\]\[\(\)\{\}\<\>])", " $0 ");
  regex_sub(s, R"(--)", " -- ");
  // ending quotes
  s = " " + s + " ";
  regex_sub(s, R"(")", " '' ");
  regex_sub(s, R"((\S)(\'\'))", "$1 $2 ");
  regex_sub(s, R"(([^' ])('[sS]|'[mM]|'[dD]|') )", "$1 $2 ");
  regex_sub(s, R"(([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) )", "$1 $2 ");
  // contractions written together
  for (const char* pattern : {R"((?i)\b(can)(not)\b)", R"((?i)\b(d)('ye)\b)", R"((?i)\b(gim)(me)\b)",
                              R"((?i)\b(gon)(na)\b)", R"((?i)\b(got)(ta)\b)", R"((?i)\b(lem)(me)\b)",
                              R"((?i)\b(more)('n)\b)", R"((?i)\b(wan)(na)(?=\s))"})
    regex_sub(s, pattern, " $1 $2 ");
  regex_sub(s, R"((?i) ('t)(is)\b)", " $1 $2 ");
  regex_sub(s, R"((?i) ('t)(was)\b)", " $1 $2 ");
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool starts_upper(const std::string& w) {
  size_t i = 0;
  while (i < w.size() && (w[i] == '"' || w[i] == '\'' || w[i] == '(' || w[i] == '[')) ++i;
  return i < w.size() && w[i] >= 'A' && w[i] <= 'Z';
}

}  // namespace

std::vector<std::string> word_tokenize(const std::string& text) {
  // Sentences end at a period, ? or ! before a capitalised word (not after an initial like "J.").
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  std::vector<std::string> out;
  std::string sentence;
  for (size_t i = 0; i < words.size(); ++i) {
    sentence += (sentence.empty() ? "" : " ") + words[i];
    const std::string& w = words[i];
    const char last = w.back();
    const bool initial = w.size() == 2 && last == '.' && w[0] >= 'A' && w[0] <= 'Z';
    if (i + 1 == words.size() || ((last == '.' || last == '?' || last == '!') && !initial && starts_upper(words[i + 1]))) {
      for (std::string& t : treebank(sentence)) out.push_back(std::move(t));
      sentence.clear();
    }
  }
  return out;
}

std::string word_tokenized(const std::string& text) {
  std::string out;
  for (const std::string& w : word_tokenize(text)) out += (out.empty() ? "" : " ") + w;
  return out;
}

}  // namespace tessera::tasks
