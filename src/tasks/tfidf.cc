#include "tasks/tfidf.h"

#include <cmath>
#include <set>
#include <sstream>

#include "tasks/dialogue_f1.h"

namespace tessera::tasks {
namespace {

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(normalize_answer(text));
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

TfIdf::TfIdf(const std::vector<std::string>& corpus) : documents_(static_cast<double>(corpus.size())) {
  for (const std::string& text : corpus) {
    const std::vector<std::string> w = words(text);
    for (const std::string& unique : std::set<std::string>(w.begin(), w.end())) ++document_frequency_[unique];
  }
}

TfIdf::Vector TfIdf::operator()(const std::string& text) const {
  Vector v;
  for (const std::string& w : words(text)) v[w] += 1;
  double norm = 0;
  for (auto& [w, x] : v) {
    auto it = document_frequency_.find(w);
    const double df = it == document_frequency_.end() ? 0 : it->second;
    x *= std::log((1 + documents_) / (1 + df)) + 1;
    norm += x * x;
  }
  for (auto& [w, x] : v) x /= std::sqrt(norm);
  return v;
}

double TfIdf::cosine(const Vector& a, const Vector& b) {
  double s = 0;
  for (const auto& [w, x] : a)
    if (auto it = b.find(w); it != b.end()) s += x * it->second;
  return s;
}

}  // namespace tessera::tasks
