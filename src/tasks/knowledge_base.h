// MEGATRON-CNTRL's external knowledge: triples of ConceptNet's assertions CSV (tab-separated: assertion
// URI, relation /r/UsedFor, head /c/en/car[/n...], tail /c/en/driving, JSON), English concepts only, each
// turned into a sentence by its relation's template ("car is used for driving"), and retrieval of the
// sentences whose head or tail is a keyword or a run of its words.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace tessera::tasks {

struct Triple {
  std::string relation, head, tail;  // "UsedFor", "car", "driving" (underscores become spaces)
};

// The sentence of a triple: the relation's template, or "head <relation in words> tail" for a relation
// without one ("HasLastSubevent" -> "has last subevent").
std::string knowledge_sentence(const Triple& t);

class KnowledgeBase {
 public:
  // Reads ConceptNet's assertions CSV: lines whose head and tail are English (/c/en/); other lines are
  // skipped, a line with fewer than 4 tab-separated fields is an Error naming the file and line.
  static KnowledgeBase read_conceptnet(const std::string& path);
  void add(const Triple& t);

  int64_t size() const { return static_cast<int64_t>(triples_.size()); }
  // The sentences of the triples whose head or tail is `keyword` or a run of its words, lower-cased
  // ("Bought fresh bread": "fresh bread", "bread", ...), in file order, at most `limit`, each once.
  std::vector<std::string> retrieve(const std::string& keyword, int64_t limit) const;
  // The concepts of those triples (heads and tails, the keyword's own among them), sorted.
  std::vector<std::string> neighbours(const std::string& keyword) const;
  // All keywords' sentences, each once, at most `limit_per_keyword` per keyword.
  std::vector<std::string> retrieve(const std::vector<std::string>& keywords, int64_t limit_per_keyword) const;

 private:
  std::set<size_t> matches(const std::string& keyword) const;  // the triples retrieve() draws on

  std::vector<Triple> triples_;
  std::map<std::string, std::vector<size_t>> by_concept_;
};

}  // namespace tessera::tasks
