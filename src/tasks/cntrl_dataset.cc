#include "tasks/cntrl_dataset.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>

#include "core/check.h"
#include "core/file_io.h"
#include "data/json_field.h"
#include "data/numpy_random.h"

namespace tessera::tasks {
namespace {

std::string trim_lower(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  std::string out = s.substr(b, e - b);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Each line of a JSONL file as an object, with "path:line" for errors.
template <typename F>
void for_each_json_line(const std::string& path, F&& f) {
  std::ifstream in = open_input_file(path, path);
  int64_t number = 0, objects = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    TESSERA_CHECK(!j.is_discarded() && j.is_object(), where, ": not a JSON object");
    f(j, where);
    ++objects;
  }
  TESSERA_CHECK(objects > 0, path, ": no examples (an empty file)");
}

std::string string_field(const nlohmann::json& j, const char* name, const std::string& where) {
  const nlohmann::json& v = data::required_field(j, name, where);
  TESSERA_CHECK(v.is_string(), where, ": \"", name, "\" is not a string");
  return v.get<std::string>();
}

std::vector<std::string> strings_field(const nlohmann::json& j, const char* name, const std::string& where) {
  const nlohmann::json& v = data::required_field(j, name, where);
  TESSERA_CHECK(v.is_array(), where, ": \"", name, "\" is not a list");
  std::vector<std::string> out;
  for (const nlohmann::json& s : v) {
    TESSERA_CHECK(s.is_string(), where, ": \"", name, "\" holds a ", s.type_name(), ", not a string");
    out.push_back(s.get<std::string>());
  }
  return out;
}

}  // namespace

std::string cntrl_keyword_prompt(const std::string& context) { return context + " Keywords:"; }

std::string cntrl_keyword_target(const std::vector<std::string>& keywords) {
  std::string target;
  for (const std::string& k : keywords) {
    target += target.empty() ? " " : ", ";
    target += k;
  }
  return target;
}

std::vector<std::string> parse_cntrl_keywords(const std::string& generated) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  size_t start = 0;
  while (start <= generated.size()) {
    const size_t comma = std::min(generated.find(',', start), generated.size());
    std::string k = trim_lower(generated.substr(start, comma - start));
    if (!k.empty() && seen.insert(k).second) out.push_back(std::move(k));
    start = comma + 1;
  }
  return out;
}

std::string cntrl_generator_prompt(const std::string& context, const std::vector<std::string>& knowledge) {
  std::string prompt = "Knowledge:";
  for (const std::string& k : knowledge) prompt.append(" ").append(k).append(".");
  return prompt + " Story: " + context;
}

std::vector<PromptTarget> read_cntrl_pairs(const std::string& path, const std::string& kind) {
  TESSERA_CHECK(kind == "keywords" || kind == "generator", "read_cntrl_pairs: unknown kind ", kind);
  std::vector<PromptTarget> out;
  for_each_json_line(path, [&](const nlohmann::json& j, const std::string& where) {
    const std::string context = string_field(j, "context", where);
    if (kind == "keywords") {
      out.push_back({cntrl_keyword_prompt(context), cntrl_keyword_target(strings_field(j, "keywords", where))});
    } else {
      out.push_back({cntrl_generator_prompt(context, strings_field(j, "knowledge_topN", where)),
                     std::string(" ").append(string_field(j, "target", where))});
    }
  });
  return out;
}

TokensTypesPaddings cntrl_ranker_sequence(const std::string& knowledge, const std::string& context,
                                          const data::Tokenizer& tokenizer, int64_t max_seq_length) {
  TESSERA_CHECK(max_seq_length >= 8, "the knowledge ranker needs --seq-length >= 8, not ", max_seq_length);
  std::vector<int32_t> a = tokenizer.encode(knowledge), b = tokenizer.encode(context);
  // [CLS] a [SEP] b [SEP]: the knowledge keeps up to half the room, the context the end that fits.
  const auto room = static_cast<size_t>(max_seq_length - 3);
  if (a.size() > room / 2) a.resize(room / 2);
  if (b.size() > room - a.size()) b.erase(b.begin(), b.end() - static_cast<std::ptrdiff_t>(room - a.size()));
  return build_tokens_types_paddings(a, &b, max_seq_length, tokenizer.cls(), tokenizer.sep(), tokenizer.pad());
}

std::vector<MultipleChoiceSample> read_cntrl_ranker_questions(const std::string& path, const data::Tokenizer& tokenizer,
                                                              int64_t max_seq_length, int64_t choices,
                                                              uint64_t seed) {
  TESSERA_CHECK(choices >= 2, "the knowledge ranker trains on questions of >= 2 choices, not ", choices);
  TESSERA_CHECK(tokenizer.cls() >= 0 && tokenizer.sep() >= 0 && tokenizer.pad() >= 0, "the ",
                tokenizer.name(), " has no [CLS], [SEP] and [PAD]: the knowledge ranker is a BERT");
  struct Line {
    std::string context;
    std::vector<std::string> knowledge;
    std::vector<int> labels;
  };
  std::vector<Line> lines;
  std::vector<std::string> pool;  // every line's knowledge, for topping up negatives
  for_each_json_line(path, [&](const nlohmann::json& j, const std::string& where) {
    Line l{string_field(j, "context", where), strings_field(j, "knowledge", where), {}};
    const nlohmann::json& labels = data::required_field(j, "pseudo_labels", where);
    TESSERA_CHECK(labels.is_array() && labels.size() == l.knowledge.size(), where,
                  ": \"pseudo_labels\" must be a list of one 0 or 1 per knowledge sentence (", l.knowledge.size(), ")");
    for (const nlohmann::json& v : labels) {
      TESSERA_CHECK(v.is_number_integer() && (v == 0 || v == 1), where, ": a pseudo-label is ", v.dump(),
                    ", not 0 or 1");
      l.labels.push_back(v.get<int>());
    }
    pool.insert(pool.end(), l.knowledge.begin(), l.knowledge.end());
    lines.push_back(std::move(l));
  });
  data::NumpyRandomState rng(static_cast<uint32_t>(seed));
  std::vector<MultipleChoiceSample> out;
  for (const Line& l : lines) {
    const auto positive = std::find(l.labels.begin(), l.labels.end(), 1);
    if (positive == l.labels.end()) continue;
    const std::string& right = l.knowledge[static_cast<size_t>(positive - l.labels.begin())];
    std::vector<std::string> negatives;
    for (size_t i = 0; i < l.knowledge.size(); ++i)
      if (l.labels[i] == 0 && l.knowledge[i] != right) negatives.push_back(l.knowledge[i]);
    rng.shuffle(std::span<std::string>(negatives));
    const auto wanted = static_cast<size_t>(choices - 1);
    if (negatives.size() > wanted) negatives.resize(wanted);
    // Too few: other lines' knowledge, drawn at random, each once and none this line's positive.
    for (int64_t tries = 0; negatives.size() < wanted && tries < 100 * choices; ++tries) {
      const std::string& k = pool[static_cast<size_t>(rng.random_interval(pool.size() - 1))];
      if (k != right && std::find(negatives.begin(), negatives.end(), k) == negatives.end()) negatives.push_back(k);
    }
    TESSERA_CHECK(negatives.size() == wanted, path, ": too few distinct knowledge sentences in the file for ",
                  choices, " choices per question");
    MultipleChoiceSample s;
    s.uid = static_cast<int64_t>(out.size());
    s.label = static_cast<int32_t>(rng.random_interval(wanted));
    negatives.insert(negatives.begin() + s.label, right);
    for (const std::string& k : negatives) s.choices.push_back(cntrl_ranker_sequence(k, l.context, tokenizer, max_seq_length));
    out.push_back(std::move(s));
  }
  TESSERA_CHECK(!out.empty(), path, ": no line has a pseudo-positive, so there is nothing to train the ranker on");
  return out;
}

}  // namespace tessera::tasks
