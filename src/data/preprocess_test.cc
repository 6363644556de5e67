#include "data/preprocess.h"

#include <gtest/gtest.h>

namespace tessera::data {
namespace {

// The jsonl line parser of `tessera preprocess` on its own (also fuzzed: fuzz/preprocess_jsonl_fuzzer.cc).
TEST(ParseJsonlLine, TextsOfTheKeysOrWhatIsWrong) {
  std::vector<std::string> texts;
  EXPECT_EQ(parse_jsonl_line(R"({"text": "a\u00e9\n", "title": "t", "n": 3})", {"text", "title"}, texts), "");
  EXPECT_EQ(texts, (std::vector<std::string>{"a\xc3\xa9\n", "t"}));
  EXPECT_EQ(parse_jsonl_line(R"({"text": "x", "text": "last"})", {"text"}, texts), "");
  EXPECT_EQ(texts, std::vector<std::string>{"last"});  // as Python's json: the last duplicate wins

  EXPECT_EQ(parse_jsonl_line(R"({"text": "a"})", {"text", "title"}, texts), "no key \"title\"");
  EXPECT_TRUE(texts.empty());
  EXPECT_EQ(parse_jsonl_line(R"({"text": 5})", {"text"}, texts), "a non-string value for key \"text\"");
  for (const char* bad : {"[1]", "\"text\"", "{\"text\": \"a\"", "{\"text\": \"a\"} x", "\xff", ""})
    EXPECT_EQ(parse_jsonl_line(bad, {"text"}, texts), "not a JSON object") << bad;
  EXPECT_TRUE(texts.empty());
}

}  // namespace
}  // namespace tessera::data
