#include "eval/zeroshot_datasets.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/file_io.h"
#include "eval/detokenizer.h"

namespace tessera::eval {

LmWindows::LmWindows(std::vector<int32_t> tokens, int64_t seq_length, int32_t pad_id, int64_t overlapping_eval)
    : tokens_(std::move(tokens)), seq_length_(seq_length), pad_id_(pad_id) {
  TESSERA_CHECK(seq_length > 0, "--seq-length=", seq_length, ": must be > 0");
  TESSERA_CHECK(overlapping_eval >= 0 && overlapping_eval <= seq_length, "--overlapping-eval=", overlapping_eval,
                ": must be between 1 and --seq-length=", seq_length, " (0: the whole window)");
  overlapping_eval_ = std::max<int64_t>(1, overlapping_eval == 0 ? seq_length : overlapping_eval);
  const int64_t total_targets = static_cast<int64_t>(tokens_.size()) - 1;
  const int64_t targets = std::max<int64_t>(total_targets - overlapping_eval_, 0);  // after the first window
  total_sequences_ = std::max<int64_t>((targets + overlapping_eval_ - 1) / overlapping_eval_ + 1, 1);
}

EvalSample LmWindows::at(int64_t index) const {
  TESSERA_CHECK(index >= 0 && index < total_sequences_, "window ", index, " of ", total_sequences_);
  const int64_t n = static_cast<int64_t>(tokens_.size());
  const int64_t start = std::min(index * overlapping_eval_, n);
  const int64_t end = std::min(start + seq_length_ + 1, n);
  EvalSample s;
  s.tokens.assign(tokens_.begin() + start, tokens_.begin() + end);
  std::vector<float> pad_mask(s.tokens.size(), 1.0f);
  pad_mask.resize(seq_length_ + 1, 0.0f);
  s.tokens.resize(seq_length_ + 1, pad_id_);
  s.mask.assign(pad_mask.begin() + 1, pad_mask.end());
  if (overlapping_eval_ != seq_length_ && index != 0)  // numpy's pad_mask[:-overlapping_eval] *= 0
    std::fill(s.mask.begin(), s.mask.end() - overlapping_eval_, 0.0f);
  return s;
}

int64_t count_original_tokens(const std::string& text) {
  // Python's str.strip() (ASCII whitespace is all WikiText has at its ends), then split(" ").
  const char* ws = " \t\n\r\f\v";
  size_t first = text.find_first_not_of(ws);
  if (first == std::string::npos) return 1;  // "".split(" ") == [""]
  size_t last = text.find_last_not_of(ws);
  return 1 + std::count(text.begin() + first, text.begin() + last + 1, ' ');
}

namespace {

std::string read_file(const std::string& path, const char* flag) {
  std::ifstream in = open_input_file(path, str_cat(flag, "=", path), std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

WikitextData load_wikitext(const std::string& path, const data::Tokenizer& tokenizer) {
  std::string text = read_file(path, "--valid-data");
  WikitextData d;
  d.num_original_tokens = count_original_tokens(text);
  d.tokens = tokenizer.encode(detokenize_for_path(path, std::move(text)));
  return d;
}

LambadaExample lambada_example(const std::string& text, const data::Tokenizer& tokenizer, bool strict) {
  LambadaExample e;
  if (!strict) {
    std::vector<int32_t> tokens = tokenizer.encode(text);
    TESSERA_CHECK(tokens.size() >= 2, "LAMBADA passage '", text.substr(0, 40), "' has fewer than 2 tokens");
    e.label = {tokens.back()};
    tokens.pop_back();
    e.context = std::move(tokens);
    return e;
  }
  // Python's text.split()[-1] and text.rfind(last_word).
  const char* ws = " \t\n\r\f\v";
  size_t end = text.find_last_not_of(ws);
  TESSERA_CHECK(end != std::string::npos, "LAMBADA passage is empty");
  size_t begin = text.find_last_of(ws, end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  std::string last_word = text.substr(begin, end + 1 - begin);
  size_t start = text.rfind(last_word);
  std::string before = text.substr(0, start);
  size_t b = before.find_first_not_of(ws), l = before.find_last_not_of(ws);
  before = b == std::string::npos ? "" : before.substr(b, l + 1 - b);  // .strip()
  e.context = tokenizer.encode(before);
  e.label = tokenizer.encode(" " + last_word);
  return e;
}

std::vector<LambadaExample> load_lambada(const std::string& path, const data::Tokenizer& tokenizer, bool strict) {
  std::ifstream in = open_input_file(path, str_cat("--valid-data=", path));
  std::vector<LambadaExample> out;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      TESSERA_CHECK(false, path, ":", number, ": not a JSON line (", e.what(), ")");
    }
    TESSERA_CHECK(j.is_object() && j.contains("text") && j["text"].is_string(), path, ":", number,
                  ": expected an object with a string field \"text\"");
    out.push_back(lambada_example(j["text"].get<std::string>(), tokenizer, strict));
  }
  TESSERA_CHECK(!out.empty(), "--valid-data=", path, ": no examples");
  return out;
}

EvalSample lambada_sample(const LambadaExample& e, int64_t seq_length, int32_t pad_id) {
  std::vector<int32_t> tokens = e.context;
  tokens.insert(tokens.end(), e.label.begin(), e.label.end());
  std::vector<float> pad_mask(e.context.size(), 0.0f);
  pad_mask.resize(tokens.size(), 1.0f);
  const size_t want = static_cast<size_t>(seq_length) + 1;
  if (tokens.size() > want) {  // keep the end: the label and the context just before it
    tokens.erase(tokens.begin(), tokens.end() - want);
    pad_mask.erase(pad_mask.begin(), pad_mask.end() - want);
  }
  pad_mask.resize(want, 0.0f);
  tokens.resize(want, pad_id);
  EvalSample s;
  s.tokens = std::move(tokens);
  s.mask.assign(pad_mask.begin() + 1, pad_mask.end());
  return s;
}

}  // namespace tessera::eval
