#include "tasks/dialogue_f1.h"

#include <map>
#include <sstream>

#include "core/check.h"
#include "eval/python_regex.h"

namespace tessera::tasks {

using eval::regex_sub;

namespace {

std::vector<std::string> split_whitespace(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

std::string normalize_answer(const std::string& text) {
  std::string s;
  for (char c : text) s += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;  // ASCII, as Python's
  regex_sub(s, R"([!"#$%&()*+,\-./:;<=>?@\[\]\\^`{|}~_'])", " ");                      // lower() for these
  regex_sub(s, R"(\b(a|an|the)\b)", " ");
  std::string out;
  for (const std::string& w : split_whitespace(s)) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::optional<PrecisionRecallF1> token_f1(const std::string& guess, const std::string& answer) {
  if (answer.empty()) return std::nullopt;
  if (guess.empty()) return PrecisionRecallF1{};
  const std::vector<std::string> g = split_whitespace(normalize_answer(guess)), a = split_whitespace(normalize_answer(answer));
  std::map<std::string, int> gold;
  for (const std::string& w : a) ++gold[w];
  int same = 0;
  for (const std::string& w : g)
    if (auto it = gold.find(w); it != gold.end() && it->second > 0) --it->second, ++same;
  if (same == 0) return PrecisionRecallF1{};
  PrecisionRecallF1 r;
  r.precision = static_cast<double>(same) / static_cast<double>(g.size());
  r.recall = static_cast<double>(same) / static_cast<double>(a.size());
  r.f1 = 2 * r.precision * r.recall / (r.precision + r.recall);
  return r;
}

PrecisionRecallF1 mean_token_f1(const std::vector<std::string>& guesses, const std::vector<std::string>& answers) {
  TESSERA_CHECK(guesses.size() == answers.size(), "F1: ", guesses.size(), " guesses for ", answers.size(), " answers");
  PrecisionRecallF1 sum;
  int n = 0;
  for (size_t i = 0; i < guesses.size(); ++i)
    if (auto r = token_f1(guesses[i], answers[i])) {
      sum.precision += r->precision, sum.recall += r->recall, sum.f1 += r->f1;
      ++n;
    }
  TESSERA_CHECK(n > 0, "F1: every answer is empty");
  return {sum.precision / n, sum.recall / n, sum.f1 / n};
}

}  // namespace tessera::tasks
