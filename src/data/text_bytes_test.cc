#include "data/text_bytes.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/check.h"

namespace tessera::data {
namespace {

// Pieces as SentencePiece has them: "_" stands for a space, and a decoded text drops its first space.
class PieceTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (int32_t id : ids) {
      TESSERA_CHECK(id != kEod, "the end of document is not text");
      for (char c : pieces_[id]) text += c == '_' ? ' ' : c;
    }
    return !text.empty() && text[0] == ' ' ? text.substr(1) : text;
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  int32_t eod() const override { return kEod; }
  std::string_view name() const override { return "PieceTokenizer"; }

  static constexpr int32_t kEod = 4;

 private:
  std::vector<std::string> pieces_{"_The", "_jur", "y", "\xc3\xa9", "<eod>"};
};

TEST(TextBytes, DecodesEachScoredRunOnce) {
  PieceTokenizer t;
  const std::vector<int32_t> ids{0, 1, 2, 3};
  // "The jury" + "é" (two bytes): the leading space of the run is dropped.
  EXPECT_EQ(text_bytes(t, ids, std::vector<float>{1, 1, 1, 1}), 3 + 4 + 1 + 2);
  // A hole in the mask splits the runs: " jur" alone loses its space, "é" alone is two bytes.
  EXPECT_EQ(text_bytes(t, ids, std::vector<float>{0, 1, 0, 1}), 3 + 2);
  EXPECT_EQ(text_bytes(t, ids, std::vector<float>{0, 0, 0, 0}), 0);
}

TEST(TextBytes, EndOfDocumentIsOneByte) {
  PieceTokenizer t;
  const int32_t eod = PieceTokenizer::kEod;
  const std::vector<int32_t> ids{0, 2, eod, 0, 1, eod};
  // "They" | separator | "The jur" | separator; an unscored separator counts nothing.
  EXPECT_EQ(text_bytes(t, ids, std::vector<float>{1, 1, 1, 1, 1, 1}), 4 + 1 + 7 + 1);
  EXPECT_EQ(text_bytes(t, ids, std::vector<float>{1, 1, 0, 1, 1, 0}), 4 + 7);
}

TEST(TextBytes, RefusesMismatchedLengths) {
  PieceTokenizer t;
  EXPECT_THROW(text_bytes(t, std::vector<int32_t>{0, 1}, std::vector<float>{1}), Error);
}

}  // namespace
}  // namespace tessera::data
