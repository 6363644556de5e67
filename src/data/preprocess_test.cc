#include "data/preprocess.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "data/indexed_dataset.h"
#include "data/sentence_splitter.h"

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

// One id per word (its length, at most 9), 10 per newline; words of punctuation alone have none.
class WordLengthTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    size_t letters = 0, chars = 0;
    auto word_end = [&] {
      if (letters > 0) ids.push_back(static_cast<int32_t>(std::min<size_t>(chars, 9)));
      letters = chars = 0;
    };
    for (char c : text) {
      if (c == ' ' || c == '\n') {
        word_end();
        if (c == '\n') ids.push_back(10);
        continue;
      }
      ++chars;
      if (std::isalnum(static_cast<unsigned char>(c))) ++letters;
    }
    word_end();
    return ids;
  }
  std::string decode(std::span<const int32_t>) const override { return ""; }
  int32_t vocab_size() const override { return 12; }
  int32_t eod() const override { return 11; }
  std::string_view name() const override { return "WordLengthTokenizer"; }
};

TEST(EncodeDocument, OneSequencePerNonEmptySentenceAndTheEodInTheLast) {
  const WordLengthTokenizer tok;
  const SentenceSplitter splitter;
  std::vector<int64_t> lengths;
  // Sentences "Mr. Smith left.", "--" (no tokens: dropped) and "He sat."
  EXPECT_EQ(encode_document("Mr. Smith left.\n\n--\n\nHe sat.", tok, &splitter, true, lengths),
            (std::vector<int32_t>{3, 5, 5, 2, 4, 11}));
  EXPECT_EQ(lengths, (std::vector<int64_t>{3, 3}));
  // Unsplit: one sequence, the newlines' ids included.
  EXPECT_EQ(encode_document("Mr. Smith left.\n\nHe sat.", tok, nullptr, false, lengths),
            (std::vector<int32_t>{3, 5, 5, 10, 10, 2, 4}));
  EXPECT_EQ(lengths, std::vector<int64_t>{7});
  // Nothing to encode: no sequences, no end of document.
  EXPECT_TRUE(encode_document("-- !", tok, &splitter, true, lengths).empty());
  EXPECT_TRUE(lengths.empty());
  // --keep-newlines: a sentence keeps the newlines after it.
  const SentenceSplitter keep(true);
  EXPECT_EQ(encode_document("One.\nTwo.\n", tok, &keep, false, lengths), (std::vector<int32_t>{4, 10, 4}));
  EXPECT_EQ(lengths, (std::vector<int64_t>{2, 1}));
}

class PreprocessSentences : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tessera_preprocess_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "in.jsonl") << R"({"text": "Dr. Who came. He left! Then? Gone."})" "\n"
                                     << R"({"text": "-- ..."})" "\n"
                                     << R"({"text": "One more, i.e. the last."})" "\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  PreprocessOptions options() const {
    PreprocessOptions o;
    o.inputs = {(dir_ / "in.jsonl").string()};
    o.output_prefix = (dir_ / "out").string();
    o.append_eod = true;
    o.workers = 2;
    o.chunk_documents = 2;  // documents meet chunk boundaries
    return o;
  }
  std::filesystem::path dir_;
};

TEST_F(PreprocessSentences, WritesOneSequencePerSentenceAndTheDocumentsInTheIndex) {
  PreprocessOptions o = options();
  o.split_sentences = true;
  const PreprocessProgress p = preprocess(o, WordLengthTokenizer());
  EXPECT_EQ(p.documents, 2);
  EXPECT_EQ(p.sentences, 5);
  EXPECT_EQ(p.skipped_empty, 1);
  EXPECT_EQ(output_dataset_prefix(o.output_prefix, "text", true), o.output_prefix + "_text_sentence");
  IndexedDataset ds(o.output_prefix + "_text_sentence");
  EXPECT_EQ(ds.sequence_lengths(), (std::vector<int32_t>{3, 2, 1, 2, 6}));
  EXPECT_EQ(ds.document_indices(), (std::vector<int64_t>{0, 4, 5}));
  EXPECT_EQ(ds.get(3), (std::vector<int32_t>{5, 11}));  // "Gone." and the end of the document
  EXPECT_EQ(ds.get(4), (std::vector<int32_t>{3, 5, 4, 3, 5, 11}));
  EXPECT_FALSE(std::filesystem::exists(o.output_prefix + "_text_document.idx"));
}

TEST_F(PreprocessSentences, WithoutSplittingEachDocumentIsOneSequence) {
  PreprocessOptions o = options();
  const PreprocessProgress p = preprocess(o, WordLengthTokenizer());
  EXPECT_EQ(p.sentences, 2);
  IndexedDataset ds(o.output_prefix + "_text_document");
  EXPECT_EQ(ds.sequence_lengths(), (std::vector<int32_t>{8, 6}));
  EXPECT_EQ(ds.document_indices(), (std::vector<int64_t>{0, 1, 2}));
  o.keep_newlines = true;  // only with --split-sentences
  EXPECT_THROW(preprocess(o, WordLengthTokenizer()), Error);
}

}  // namespace
}  // namespace tessera::data
