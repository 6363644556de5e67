#include "tasks/cntrl.h"

#include <algorithm>
#include <fstream>
#include <numeric>

#include "core/check.h"
#include "core/file_io.h"
#include "tasks/rake.h"
#include "tasks/tfidf.h"

namespace tessera::tasks {
namespace {

// One CSV row's fields: commas separate, double quotes enclose, "" inside quotes is a quote.
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') out.back() += '"', ++i;
      else if (c == '"') quoted = false;
      else out.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back() += c;
    }
  }
  return out;
}

std::string join(const std::vector<std::string>& sentences, size_t end) {
  std::string out;
  for (size_t i = 0; i < end; ++i) out += (i ? " " : "") + sentences[i];
  return out;
}

}  // namespace

std::vector<std::vector<std::string>> read_rocstories(const std::string& path) {
  std::ifstream in = open_input_file(path, "--stories=" + path);
  std::vector<std::vector<std::string>> stories;
  int64_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (number == 1 || line.empty()) continue;  // the header
    const std::vector<std::string> fields = csv_fields(line);
    TESSERA_CHECK(fields.size() >= 4, path, ":", number, ": ", fields.size(),
                  " fields, expected storyid, storytitle and at least two sentences");
    std::vector<std::string> story;
    for (size_t i = 2; i < fields.size(); ++i)
      if (!fields[i].empty()) story.push_back(fields[i]);
    stories.push_back(std::move(story));
  }
  return stories;
}

std::vector<CntrlExample> cntrl_examples(const std::vector<std::vector<std::string>>& stories, const KnowledgeBase& kb,
                                         const CntrlOptions& o) {
  TESSERA_CHECK(o.keywords_per_sentence > 0 && o.knowledge_per_keyword > 0 && o.top_n > 0 && o.positives >= 0,
                "MEGATRON-CNTRL data: counts must be positive");
  std::vector<std::string> corpus;
  for (const auto& story : stories) corpus.insert(corpus.end(), story.begin(), story.end());
  const TfIdf embed(corpus);
  std::vector<CntrlExample> out;
  for (const auto& story : stories)
    for (size_t i = 1; i < story.size(); ++i) {
      CntrlExample e;
      e.context = join(story, i);
      e.target = story[i];
      e.keywords = rake_keywords(e.target, o.keywords_per_sentence);
      e.knowledge = kb.retrieve(e.keywords, o.knowledge_per_keyword);
      const TfIdf::Vector target = embed(e.target);
      for (const std::string& k : e.knowledge) e.similarity.push_back(TfIdf::cosine(embed(k), target));
      std::vector<size_t> order(e.knowledge.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return e.similarity[a] > e.similarity[b]; });
      e.pseudo_labels.assign(e.knowledge.size(), 0);
      for (size_t r = 0; r < order.size() && static_cast<int64_t>(r) < o.positives; ++r) e.pseudo_labels[order[r]] = 1;
      for (size_t r = 0; r < order.size() && static_cast<int64_t>(r) < o.top_n; ++r)
        e.knowledge_top.push_back(e.knowledge[order[r]]);
      out.push_back(std::move(e));
    }
  return out;
}

}  // namespace tessera::tasks
