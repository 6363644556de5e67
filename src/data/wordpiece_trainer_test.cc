// The WordPiece trainer: a hand-checked run, and a vocabulary trained on a small corpus that has the
// special pieces first, the size asked for, and tokenizes its own corpus without [UNK].
#include "data/wordpiece_trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/check.h"
#include "data/bert_wordpiece_tokenizer.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;

const fs::path kRepoRoot = fs::absolute(__FILE__).parent_path().parent_path().parent_path();

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "wordpiece_trainer_XXXXXX").string();
    TESSERA_CHECK(mkdtemp(templ.data()) != nullptr, "mkdtemp failed");
    path = templ;
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

using Pieces = std::vector<std::string>;

TEST(WordPieceTrainer, HandChecked) {
  // Words ab x3, abc x1. Alphabet a b c (code point order), then ##b (from "ab", the first word in byte
  // order) and ##c; pairs (a, ##b) 4 and (##b, ##c) 1: merge a+##b = "ab"; then (ab, ##c) 1 = "abc".
  WordPieceTrainOptions o;
  o.min_frequency = 0;
  o.vocab_size = 100;
  const Pieces all = train_wordpiece_vocab({{"ab", 3}, {"abc", 1}}, o);
  EXPECT_EQ(all, (Pieces{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "##b", "##c", "ab", "abc"}));
  o.vocab_size = 11;  // stops at the size asked
  EXPECT_EQ(train_wordpiece_vocab({{"ab", 3}, {"abc", 1}}, o).back(), "ab");
  o.vocab_size = 100;
  o.min_frequency = 2;  // (ab, ##c) occurs once: not merged
  EXPECT_EQ(train_wordpiece_vocab({{"ab", 3}, {"abc", 1}}, o).back(), "ab");
  // Ties go to the smaller pair of ids: x ##y and x ##z both occur twice; ##y came first.
  o.min_frequency = 0;
  EXPECT_EQ(train_wordpiece_vocab({{"xy", 2}, {"xz", 2}}, o),
            (Pieces{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "x", "y", "z", "##y", "##z", "xy", "xz"}));
  // --limit-alphabet: the rarest characters are dropped from the words ("q", once) and "##" stays by
  // position, so "qab" is ##a ##b: merges a+##b (5 times), then ##a+##b = "##ab".
  o.limit_alphabet = 2;
  EXPECT_EQ(train_wordpiece_vocab({{"qab", 1}, {"ab", 5}}, o),
            (Pieces{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "##b", "##a", "ab", "##ab"}));
}

// A small corpus: the hard cases and the first 100 KB of WikiText-103's validation text (a checked-in,
// checksummed file, so the corpus does not change with the documentation), trained at both casings.
TEST(WordPieceTrainer, TrainsAVocabularyThatCoversItsCorpus) {
  TempDir tmp;
  const fs::path corpus = tmp.path / "wiki.txt";
  {
    std::ifstream wiki(kRepoRoot / "data" / "eval" / "wiki.valid.tokens", std::ios::binary);
    std::string text(100000, '\0');
    wiki.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(wiki.gcount()));
    text.resize(text.rfind('\n') + 1);  // whole lines
    std::ofstream(corpus, std::ios::binary) << text;
  }
  for (bool lower : {true, false}) {
    WordPieceTrainOptions o;
    o.input = {corpus.string(), (kRepoRoot / "src" / "data" / "testdata" / "bert_hard_cases.txt").string()};
    o.model_prefix = (tmp.path / (lower ? "uncased" : "cased")).string();
    o.vocab_size = 2000;
    o.lower_case = lower;
    const WordPieceTrainResult r = train_wordpiece(o);
    EXPECT_EQ(r.vocab_path, o.model_prefix + "-vocab.txt");
    const auto lines = read_lines(r.vocab_path);
    EXPECT_EQ(static_cast<int32_t>(lines.size()), 2000);
    EXPECT_EQ(r.vocab_size, 2000);
    EXPECT_EQ(Pieces(lines.begin(), lines.begin() + 5), wordpiece_special_pieces());
    EXPECT_EQ(std::set<std::string>(lines.begin(), lines.end()).size(), lines.size()) << "pieces are unique";
    BertWordPieceTokenizer t(r.vocab_path, lower);
    size_t tokens = 0, words = 0;
    std::ifstream in(corpus);
    for (std::string line; std::getline(in, line);) {
      const auto ids = t.encode(line);
      tokens += ids.size();
      words += bert_basic_tokenize(line, lower).size();
      EXPECT_EQ(std::count(ids.begin(), ids.end(), t.unk()), 0) << line;
    }
    EXPECT_GT(tokens, words / 2);
    // Frequent words are single pieces; the casing shows.
    EXPECT_EQ(t.tokenize("the"), (Pieces{"the"}));
    EXPECT_EQ(t.tokenize("The").size(), 1u);
    EXPECT_EQ(t.tokenize("The").front(), lower ? "the" : "The");
    // Deterministic: a second training writes the same file.
    o.model_prefix += "2";
    EXPECT_EQ(read_lines(train_wordpiece(o).vocab_path), lines);
  }
}

TEST(WordPieceTrainer, Errors) {
  TempDir tmp;
  WordPieceTrainOptions o;
  o.model_prefix = (tmp.path / "v").string();
  auto message = [&] {
    try {
      train_wordpiece(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message().find("--input"), std::string::npos);
  o.input = {(tmp.path / "missing.txt").string()};
  EXPECT_NE(message().find("missing.txt' does not exist"), std::string::npos) << message();
  std::ofstream(tmp.path / "text.txt") << "some text\n";
  o.input = {(tmp.path / "text.txt").string()};
  o.vocab_size = 5;
  EXPECT_NE(message().find("--vocab-size must be more than the 5 special pieces"), std::string::npos) << message();
  o.vocab_size = 100;
  o.model_prefix = (tmp.path / "nodir" / "v").string();
  EXPECT_NE(message().find("does not exist"), std::string::npos) << message();
  std::ofstream(tmp.path / "empty.txt") << " \n\t\n";
  o.model_prefix = (tmp.path / "v").string();
  o.input = {(tmp.path / "empty.txt").string()};
  EXPECT_NE(message().find("no words"), std::string::npos) << message();
}

}  // namespace
}  // namespace tessera::data
