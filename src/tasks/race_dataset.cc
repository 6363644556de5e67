#include "tasks/race_dataset.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "data/json_field.h"

namespace tessera::tasks {
namespace {

namespace fs = std::filesystem;

// Python's str.replace(old, new): every non-overlapping occurrence, left to right.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string_view::npos; at = hit + from.size()) {
    out.append(s.substr(at, hit - at));
    out.append(to);
  }
  out.append(s.substr(at));
  return out;
}

// The code point whose UTF-8 encoding starts at s[i] and its length; an ill-formed byte is itself.
char32_t next_code_point(std::string_view s, size_t i, size_t& length) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    length = 1;
    return 0xFFFD;
  }
  char32_t cp = n == 1 ? b : b & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c >> 6) != 0x2) {
      length = 1;
      return 0xFFFD;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  length = n;
  return cp;
}

// Python's str.isspace(), which is what re's \s matches in a str pattern.
bool python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string string_of(const nlohmann::json& j, const std::string& where) {
  TESSERA_CHECK(j.is_string(), where, " is not a string");
  return j.get<std::string>();
}

}  // namespace

std::string clean_text(std::string_view text) {
  const std::string no_newlines = replace_all(text, "\n", " ");
  std::string collapsed;
  bool in_space = false;
  for (size_t i = 0; i < no_newlines.size();) {
    size_t n = 1;
    const char32_t c = next_code_point(no_newlines, i, n);
    if (python_space(c)) {
      if (!in_space) collapsed.push_back(' ');
      in_space = true;
    } else {
      collapsed.append(no_newlines, i, n);
      in_space = false;
    }
    i += n;
  }
  for (int pass = 0; pass < 3; ++pass) collapsed = replace_all(collapsed, " . ", ". ");
  return collapsed;
}

TokensTypesPaddings build_tokens_types_paddings(const std::vector<int32_t>& a, const std::vector<int32_t>* b,
                                                int64_t max_seq_length, int32_t cls, int32_t sep, int32_t pad) {
  TESSERA_CHECK(max_seq_length >= 2, "a sequence of [CLS] and [SEP] needs --seq-length >= 2, not ", max_seq_length);
  TokensTypesPaddings t;
  auto add = [&t](int32_t id, int32_t type, int32_t padding) {
    t.ids.push_back(id);
    t.types.push_back(type);
    t.paddings.push_back(padding);
  };
  add(cls, 0, 1);
  for (int32_t id : a) add(id, 0, 1);
  add(sep, 0, 1);
  if (b)
    for (int32_t id : *b) add(id, 1, 1);
  bool trimmed = false;
  if (static_cast<int64_t>(t.ids.size()) >= max_seq_length) {
    const auto keep = static_cast<size_t>(max_seq_length - 1);
    t.ids.resize(keep);
    t.types.resize(keep);
    t.paddings.resize(keep);
    trimmed = true;
  }
  if (b || trimmed) add(sep, b ? 1 : 0, 1);
  while (static_cast<int64_t>(t.ids.size()) < max_seq_length) add(pad, pad, 0);
  return t;
}

std::vector<MultipleChoiceSample> read_race_directory(const std::string& dir, const data::Tokenizer& tokenizer,
                                                      int64_t max_seq_length, RaceReadStats* stats,
                                                      int64_t max_qa_length) {
  const auto start = std::chrono::steady_clock::now();
  TESSERA_CHECK(tokenizer.cls() >= 0 && tokenizer.sep() >= 0 && tokenizer.pad() >= 0, "--tokenizer-type ",
                tokenizer.name(), " has no [CLS], [SEP] and [PAD] tokens; RACE needs BertWordPieceLowerCase or "
                "BertWordPieceCase");
  TESSERA_CHECK(fs::is_directory(dir), "RACE data directory ", dir, " does not exist");
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
  TESSERA_CHECK(!files.empty(), "RACE data directory ", dir, " has no *.txt file");
  std::sort(files.begin(), files.end());

  RaceReadStats s;
  std::vector<MultipleChoiceSample> samples;
  for (const fs::path& file : files) {
    std::ifstream in(file);
    TESSERA_CHECK(in.good(), "cannot read ", file.string());
    std::string line;
    for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
      const std::string where = str_cat(file.string(), ":", line_number);
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      TESSERA_CHECK(!j.is_discarded() && j.is_object(), where, ": not a JSON object");
      ++s.documents;
      const std::string article = string_of(data::required_field(j, "article", where), where + ": \"article\"");
      const nlohmann::json& questions = data::required_field(j, "questions", where);
      const nlohmann::json& options = data::required_field(j, "options", where);
      const nlohmann::json& answers = data::required_field(j, "answers", where);
      TESSERA_CHECK(questions.is_array() && options.is_array() && answers.is_array(), where,
                    ": \"questions\", \"options\" and \"answers\" must be arrays");
      TESSERA_CHECK(questions.size() == answers.size() && questions.size() == options.size(), where, ": ",
                    questions.size(), " questions, ", options.size(), " option lists and ", answers.size(),
                    " answers");
      const std::vector<int32_t> context = tokenizer.encode(clean_text(article));
      for (size_t q = 0; q < questions.size(); ++q) {
        ++s.questions;
        const std::string at = str_cat(where, ": question ", q);
        const std::string question = string_of(questions[q], at);
        const std::string answer = string_of(answers[q], at + ": the answer");
        TESSERA_CHECK(answer.size() == 1 && answer[0] >= 'A' && answer[0] < 'A' + kRaceChoices, at,
                      ": the answer is \"", answer, "\", not one of A, B, C, D");
        TESSERA_CHECK(options[q].is_array() && options[q].size() == kRaceChoices, at, ": has ",
                      options[q].is_array() ? options[q].size() : 0, " options, not ", kRaceChoices);
        MultipleChoiceSample sample;
        sample.label = answer[0] - 'A';
        sample.uid = s.samples;
        for (int c = 0; c < kRaceChoices; ++c) {
          const std::string option = string_of(options[q][c], str_cat(at, ": option ", c));
          const std::string qa = question.find('_') != std::string::npos ? replace_all(question, "_", option)
                                                                         : question + " " + option;
          std::vector<int32_t> qa_ids = tokenizer.encode(clean_text(qa));
          if (static_cast<int64_t>(qa_ids.size()) > max_qa_length) qa_ids.resize(static_cast<size_t>(max_qa_length));
          sample.choices.push_back(build_tokens_types_paddings(qa_ids, &context, max_seq_length, tokenizer.cls(),
                                                               tokenizer.sep(), tokenizer.pad()));
        }
        samples.push_back(std::move(sample));
        ++s.samples;
      }
    }
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (stats) *stats = s;
  return samples;
}

std::string race_dataset_name(const std::string& dir) {
  const size_t at = dir.rfind("RACE");
  std::string rest = at == std::string::npos ? dir : dir.substr(at + 4);
  const size_t first = rest.find_first_not_of('/');
  if (first == std::string::npos) return "";
  rest = rest.substr(first, rest.find_last_not_of('/') - first + 1);
  std::replace(rest.begin(), rest.end(), '/', '-');
  return rest;
}

}  // namespace tessera::tasks
