// libFuzzer target: the jsonl line parser of `tessera preprocess` (data::parse_jsonl_line) on arbitrary
// bytes, cut into lines as the reader cuts its input (std::getline on '\n'). Every line must give its
// texts or an error message, never a crash or an exception; the result must agree with nlohmann's
// throwing parser (accepted exactly when that parser gives an object with a string under every key,
// and then the same strings). Built and run by scripts/fuzz.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/preprocess.h"

namespace {

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "preprocess_jsonl_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

// The texts under `keys` by the throwing parser, or false where the line is to be refused.
bool reference(std::string_view line, const std::vector<std::string>& keys, std::vector<std::string>& texts) {
  texts.clear();
  try {
    nlohmann::json j = nlohmann::json::parse(line);
    if (!j.is_object()) return false;
    for (const std::string& k : keys) {
      if (!j.contains(k) || !j[k].is_string()) {
        texts.clear();
        return false;
      }
      texts.push_back(j[k].get<std::string>());
    }
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // --json-keys text (the default) and a second key, as `--json-keys text title` would.
  static const std::vector<std::string> keys{"text", "title"};
  static const std::vector<std::string> one_key{"text"};
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> texts, expected;
  while (!input.empty()) {
    const size_t end = input.find('\n');
    const std::string_view line = input.substr(0, end);
    input = end == std::string_view::npos ? std::string_view() : input.substr(end + 1);
    if (line.empty()) continue;  // the reader skips empty lines
    for (const auto* k : {&one_key, &keys}) {
      const std::string error = tessera::data::parse_jsonl_line(line, *k, texts);
      const bool ok = reference(line, *k, expected);
      require(error.empty() == ok, "parse_jsonl_line accepts exactly what the throwing parser accepts");
      require(texts == expected, "the texts are the throwing parser's");
      require(error.empty() || texts.empty(), "a refused line gives no texts");
    }
  }
  return 0;
}
