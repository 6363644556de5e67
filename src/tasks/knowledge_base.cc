#include "tasks/knowledge_base.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/file_io.h"

namespace tessera::tasks {
namespace {

// "/c/en/ice_cream/n/..." -> "ice cream"; empty for a concept of another language.
std::string english_concept(const std::string& uri) {
  const std::string prefix = "/c/en/";
  if (uri.rfind(prefix, 0) != 0) return "";
  std::string name = uri.substr(prefix.size(), uri.find('/', prefix.size()) - prefix.size());
  for (char& c : name)
    if (c == '_') c = ' ';
  return name;
}

// "HasLastSubevent" -> "has last subevent".
std::string relation_words(const std::string& relation) {
  std::string out;
  for (char c : relation) {
    if (std::isupper(static_cast<unsigned char>(c)) && !out.empty()) out += ' ';
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace

std::string knowledge_sentence(const Triple& t) {
  static const std::map<std::string, std::string> templates = {
      {"AtLocation", "{h} is at {t}"},           {"CapableOf", "{h} can {t}"},
      {"Causes", "{h} causes {t}"},              {"CausesDesire", "{h} makes people want {t}"},
      {"CreatedBy", "{h} is created by {t}"},    {"DefinedAs", "{h} is defined as {t}"},
      {"Desires", "{h} wants {t}"},              {"HasA", "{h} has {t}"},
      {"HasPrerequisite", "{h} requires {t}"},   {"HasProperty", "{h} is {t}"},
      {"HasSubevent", "{h} involves {t}"},       {"IsA", "{h} is a {t}"},
      {"LocatedNear", "{h} is near {t}"},        {"MadeOf", "{h} is made of {t}"},
      {"MotivatedByGoal", "{h} because of {t}"}, {"PartOf", "{h} is part of {t}"},
      {"ReceivesAction", "{h} can be {t}"},      {"RelatedTo", "{h} is related to {t}"},
      {"SimilarTo", "{h} is similar to {t}"},    {"Synonym", "{h} means {t}"},
      {"Antonym", "{h} is the opposite of {t}"}, {"UsedFor", "{h} is used for {t}"}};
  auto it = templates.find(t.relation);
  if (it == templates.end()) return t.head + " " + relation_words(t.relation) + " " + t.tail;
  std::string s = it->second;
  s.replace(s.find("{h}"), 3, t.head);
  s.replace(s.find("{t}"), 3, t.tail);
  return s;
}

KnowledgeBase KnowledgeBase::read_conceptnet(const std::string& path) {
  std::ifstream in = open_input_file(path, "--knowledge-base=" + path);
  KnowledgeBase kb;
  int64_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty()) continue;
    std::vector<std::string> fields;
    std::istringstream cells(line);
    for (std::string f; std::getline(cells, f, '\t');) fields.push_back(f);
    TESSERA_CHECK(fields.size() >= 4, path, ":", number, ": ", fields.size(),
                  " tab-separated fields, expected ConceptNet's assertion, relation, head, tail (and JSON)");
    const std::string head = english_concept(fields[2]), tail = english_concept(fields[3]);
    const std::string relation = fields[1].rfind("/r/", 0) == 0 ? fields[1].substr(3) : fields[1];
    if (head.empty() || tail.empty() || relation.empty()) continue;
    kb.add({relation, head, tail});
  }
  return kb;
}

void KnowledgeBase::add(const Triple& t) {
  by_concept_[t.head].push_back(triples_.size());
  if (t.tail != t.head) by_concept_[t.tail].push_back(triples_.size());
  triples_.push_back(t);
}

std::set<size_t> KnowledgeBase::matches(const std::string& keyword) const {
  std::vector<std::string> words;
  std::istringstream in(keyword);
  for (std::string w; in >> w;) {  // ConceptNet's concepts are lower case; a user's keyword may not be
    std::transform(w.begin(), w.end(), w.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    words.push_back(w);
  }
  std::set<size_t> hits;
  for (size_t begin = 0; begin < words.size(); ++begin) {
    std::string run;
    for (size_t end = begin; end < words.size(); ++end) {
      run += (end > begin ? " " : "") + words[end];
      if (auto it = by_concept_.find(run); it != by_concept_.end()) hits.insert(it->second.begin(), it->second.end());
    }
  }
  return hits;
}

std::vector<std::string> KnowledgeBase::neighbours(const std::string& keyword) const {
  std::set<std::string> concepts;
  for (size_t i : matches(keyword)) concepts.insert({triples_[i].head, triples_[i].tail});
  return {concepts.begin(), concepts.end()};
}

std::vector<std::string> KnowledgeBase::retrieve(const std::string& keyword, int64_t limit) const {
  const std::set<size_t> hits = matches(keyword);
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (size_t i : hits) {  // file order
    if (static_cast<int64_t>(out.size()) >= limit) break;
    std::string s = knowledge_sentence(triples_[i]);
    if (seen.insert(s).second) out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::string> KnowledgeBase::retrieve(const std::vector<std::string>& keywords, int64_t limit_per_keyword) const {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const std::string& k : keywords)
    for (std::string& s : retrieve(k, limit_per_keyword))
      if (seen.insert(s).second) out.push_back(std::move(s));
  return out;
}

}  // namespace tessera::tasks
