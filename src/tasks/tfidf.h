// TF-IDF vectors of short texts over their normalized words (tasks/dialogue_f1.h's normalize_answer), for
// the similarities that Megatron's applications take from neural sentence encoders (DPR in MSDP, the
// Universal Sentence Encoder in MEGATRON-CNTRL), which Tessera does not have.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace tessera::tasks {

class TfIdf {
 public:
  using Vector = std::map<std::string, double>;  // sparse, L2-normalized

  // The inverse document frequencies of `corpus`'s words (smoothed: log((1 + n) / (1 + df)) + 1).
  explicit TfIdf(const std::vector<std::string>& corpus);
  Vector operator()(const std::string& text) const;  // empty for a text without words
  static double cosine(const Vector& a, const Vector& b);

 private:
  double documents_;
  std::unordered_map<std::string, double> document_frequency_;
};

}  // namespace tessera::tasks
