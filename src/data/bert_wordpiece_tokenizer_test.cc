// BertWordPieceTokenizer: hand-checked cases on a small vocabulary, the Megatron ids, errors, and
// id-for-id parity with Hugging Face's tokenizers (npm `tokenizers`, run by node through
// testdata/bert_reference.js) on the Brown corpus, the hard cases and every code point, with
// bert-base-uncased's vocab.txt and with a vocabulary the reference trains (scripts/fetch_bert_vocab.sh).
#include "data/bert_wordpiece_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "data/tokenizer_factory.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;

const fs::path kRepoRoot = fs::absolute(__FILE__).parent_path().parent_path().parent_path();

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), "cannot read ", path.string());
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_file(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "bert_wordpiece_XXXXXX").string();
    TESSERA_CHECK(mkdtemp(templ.data()) != nullptr, "mkdtemp failed");
    path = templ;
  }
  ~TempDir() { fs::remove_all(path); }
};

// A small vocabulary: specials first, as BERT's, then words and continuations.
const std::vector<std::string> kPieces = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "the", "cafe", "café", "naive", "a", "b",
    "##b", ",", ".", "!", "[", "]", "mask", "東", "京", "hello", "world", "Hello", "##s", "$", "~", "`", "i",
    "##̇", "σ", "##σ", "ς", "'", "s", "it", "n", "t", "don", "x", "y", "z", "aaa", "##a", "##aa"};

class BertSmall : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text;
    for (const auto& p : kPieces) text += p + "\n";
    write_file(tmp_.path / "vocab.txt", text);
  }
  int32_t id(const std::string& piece) const {
    auto it = std::find(kPieces.begin(), kPieces.end(), piece);
    EXPECT_NE(it, kPieces.end()) << piece;
    return static_cast<int32_t>(it - kPieces.begin());
  }
  std::string vocab() const { return (tmp_.path / "vocab.txt").string(); }
  TempDir tmp_;
};

using Pieces = std::vector<std::string>;

TEST_F(BertSmall, GreedyLongestMatchFirst) {
  BertWordPieceTokenizer uncased(vocab(), true);
  EXPECT_EQ(uncased.tokenize("unaffable"), (Pieces{"un", "##aff", "##able"}));
  EXPECT_EQ(uncased.tokenize("UnAffAble THE"), (Pieces{"un", "##aff", "##able", "the"}));
  // "aaaa": longest first gives aaa ##a, not a ##aa ##a.
  EXPECT_EQ(uncased.tokenize("aaaa"), (Pieces{"aaa", "##a"}));
  // A word that cannot be covered is one [UNK], whatever pieces it began with.
  EXPECT_EQ(uncased.tokenize("unaffablez the"), (Pieces{"[UNK]", "the"}));
  EXPECT_EQ(uncased.tokenize("hellos"), (Pieces{"hello", "##s"}));
  EXPECT_EQ(uncased.encode("the"), (std::vector<int32_t>{id("the")}));
}

TEST_F(BertSmall, CasingAndAccents) {
  BertWordPieceTokenizer uncased(vocab(), true), cased(vocab(), false);
  EXPECT_EQ(uncased.tokenize("Hello"), (Pieces{"hello"}));
  EXPECT_EQ(cased.tokenize("Hello HELLO"), (Pieces{"Hello", "[UNK]"}));  // cased: "HELLO" is not "hello"
  // Uncased strips accents after NFD, precomposed (U+00E9) or not (e U+0301); cased keeps them.
  EXPECT_EQ(uncased.tokenize("café cafe\u0301 NAÏVE"), (Pieces{"cafe", "cafe", "naive"}));
  EXPECT_EQ(cased.tokenize("café"), (Pieces{"café"}));
  EXPECT_EQ(cased.tokenize("cafe\u0301"), (Pieces{"[UNK]"}));  // no NFC either: e + U+0301 is not é
  // Accents go before lowercasing: İ (U+0130) is I + U+0307 in NFD, so "i"; cased keeps it whole.
  EXPECT_EQ(uncased.tokenize("İ"), (Pieces{"i"}));
  EXPECT_EQ(cased.tokenize("İ"), (Pieces{"[UNK]"}));
  // Σ lowercases to σ wherever it stands (no final sigma rule).
  EXPECT_EQ(uncased.tokenize("ΣΣ"), (Pieces{"σ", "##σ"}));
}

TEST_F(BertSmall, PunctuationCjkWhitespaceAndControls) {
  BertWordPieceTokenizer t(vocab(), true);
  EXPECT_EQ(t.tokenize("hello,world!"), (Pieces{"hello", ",", "world", "!"}));
  // ASCII symbols that Unicode does not call punctuation ($ ~ `) are punctuation to BERT.
  EXPECT_EQ(t.tokenize("a$b~a`b"), (Pieces{"a", "$", "b", "~", "a", "`", "b"}));
  EXPECT_EQ(t.tokenize("東京"), (Pieces{"東", "京"}));
  EXPECT_EQ(t.tokenize("a東b"), (Pieces{"a", "東", "b"}));
  // Controls, NUL and U+FFFD vanish (joining what they stood between); \t \n \r, NBSP, U+3000 split.
  EXPECT_EQ(t.tokenize(std::string("t\x01h\0e\xEF\xBF\xBD", 8)), (Pieces{"the"}));
  EXPECT_EQ(t.tokenize("a\tb\nx\ry\xC2\xA0z\xE3\x80\x80the"), (Pieces{"a", "b", "x", "y", "z", "the"}));
  // Invalid UTF-8 is U+FFFD, so it vanishes too.
  EXPECT_EQ(t.tokenize("th\xFF" "e"), (Pieces{"the"}));
  // Zero-width space (Cf) is a control character: removed, it joins.
  EXPECT_EQ(t.tokenize("th\xE2\x80\x8B" "e"), (Pieces{"the"}));
  EXPECT_TRUE(t.encode("").empty());
  EXPECT_TRUE(t.encode(" \t\n ").empty());
}

TEST_F(BertSmall, LongWordsAreUnknown) {
  BertWordPieceTokenizer t(vocab(), true);
  // 101 characters: [UNK] without trying.
  // 100 = aaa, then 48 of ##aa, then ##a (longest first).
  Pieces expect(48, "##aa");
  expect.insert(expect.begin(), "aaa");
  expect.push_back("##a");
  EXPECT_EQ(t.tokenize(std::string(100, 'a')), expect);
  EXPECT_EQ(t.tokenize(std::string(101, 'a')), (Pieces{"[UNK]"}));
  // Characters, not bytes: 100 "é" (200 bytes) are not too long; they are uncovered here, so [UNK].
  std::string e100;
  for (int i = 0; i < 100; ++i) e100 += "\xC3\xA9";
  EXPECT_EQ(t.tokenize(e100), (Pieces{"[UNK]"}));
}

TEST_F(BertSmall, SpecialPiecesAreNeverSplit) {
  BertWordPieceTokenizer t(vocab(), true);
  EXPECT_EQ(t.tokenize("the [MASK] a[MASK]b"), (Pieces{"the", "[MASK]", "a", "[MASK]", "b"}));
  EXPECT_EQ(t.tokenize("[CLS][SEP][PAD][UNK]"), (Pieces{"[CLS]", "[SEP]", "[PAD]", "[UNK]"}));
  // Exactly as written: "[mask]" is text, lowercased and split at its brackets.
  EXPECT_EQ(t.tokenize("[mask] [Mask]"), (Pieces{"[", "mask", "]", "[", "mask", "]"}));
  EXPECT_EQ(t.tokenize("[[MASK]]"), (Pieces{"[", "[MASK]", "]"}));
  // Megatron's added [BOS]/[EOS] are not cut out (its FullBertTokenizer never gives them either).
  EXPECT_EQ(t.tokenize("[EOS]"), (Pieces{"[", "[UNK]", "]"}));
}

TEST_F(BertSmall, MegatronIds) {
  BertWordPieceTokenizer t(vocab(), true, 2);
  const int32_t n = static_cast<int32_t>(kPieces.size());
  EXPECT_EQ(t.pad(), 0);
  EXPECT_EQ(t.unk(), 1);
  EXPECT_EQ(t.cls(), 2);
  EXPECT_EQ(t.sep(), 3);
  EXPECT_EQ(t.mask(), 4);
  EXPECT_EQ(t.bos(), n);
  EXPECT_EQ(t.eos(), n + 1);
  EXPECT_EQ(t.eod(), n + 1);
  EXPECT_EQ(t.vocab_size(), n + 4);  // [BOS] [EOS] <extra_id_0> <extra_id_1>
  EXPECT_EQ(t.token(n + 3), "<extra_id_1>");
  EXPECT_EQ(t.token(id("##aff")), "##aff");
  EXPECT_EQ(t.token_to_id("[EOS]"), n + 1);
  EXPECT_EQ(t.token_to_id("nope"), -1);
  EXPECT_EQ(t.name(), "BertWordPieceLowerCase");
  EXPECT_EQ(BertWordPieceTokenizer(vocab(), false).name(), "BertWordPieceCase");
  EXPECT_THROW(t.token(n + 4), Error);
  // A vocabulary that has [BOS] keeps its id, and [EOS] comes right after the file's pieces.
  std::string text;
  for (const auto& p : kPieces) text += p + "\n";
  write_file(tmp_.path / "with_bos.txt", text + "[BOS]\n");
  BertWordPieceTokenizer b((tmp_.path / "with_bos.txt").string(), true);
  EXPECT_EQ(b.bos(), n);
  EXPECT_EQ(b.eos(), n + 1);
  EXPECT_EQ(b.vocab_size(), n + 2);
}

TEST_F(BertSmall, DecodeIsMegatrons) {
  BertWordPieceTokenizer t(vocab(), true);
  EXPECT_EQ(t.decode(t.encode("unaffable the")), "unaffable the");
  EXPECT_EQ(t.decode(t.encode("hello , world !")), "hello, world!");
  EXPECT_EQ(t.decode(t.encode("don ' t it ' s")), "don't it's");
  EXPECT_EQ(t.decode(t.encode("[MASK] the")), "[MASK] the");
  EXPECT_EQ(t.decode(std::vector<int32_t>{t.eos()}), "[EOS]");
  EXPECT_THROW(t.decode(std::vector<int32_t>{t.vocab_size()}), Error);
  EXPECT_THROW(t.decode(std::vector<int32_t>{-1}), Error);
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one with " << parts.front();
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST_F(BertSmall, Errors) {
  const fs::path bad = tmp_.path / "bad.txt";
  expect_error([&] { BertWordPieceTokenizer((tmp_.path / "none.txt").string(), true); }, {"none.txt", "does not exist"});
  write_file(bad, "");
  expect_error([&] { BertWordPieceTokenizer(bad.string(), true); }, {"bad.txt", "empty"});
  write_file(bad, "[PAD]\n[UNK]\n\n[CLS]\n");
  expect_error([&] { BertWordPieceTokenizer(bad.string(), true); }, {"bad.txt", "line 3", "empty piece"});
  write_file(bad, "[PAD]\n[UNK]\n[PAD]\n");
  expect_error([&] { BertWordPieceTokenizer(bad.string(), true); }, {"bad.txt", "line 3", "already on line 1"});
  write_file(bad, "[PAD]\n[CLS]\n[SEP]\n[MASK]\n");
  expect_error([&] { BertWordPieceTokenizer(bad.string(), true); }, {"bad.txt", "[UNK]"});
  // CRLF files are fine.
  write_file(bad, "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\nthe\r\n");
  EXPECT_EQ(BertWordPieceTokenizer(bad.string(), true).tokenize("the"), (Pieces{"the"}));
  expect_error([] { build_tokenizer({.type = "BertWordPieceCase"}); }, {"BertWordPieceCase", "--vocab-file"});
  auto built = build_tokenizer({.type = "BertWordPieceLowerCase", .vocab_file = vocab()});
  EXPECT_EQ(built->name(), "BertWordPieceLowerCase");
  EXPECT_EQ(built->encode("the"), (std::vector<int32_t>{id("the")}));
}

// ---------------------------------------------------------------------------------------------------
// Parity with Hugging Face's tokenizers.

struct BertCache {
  fs::path dir = std::getenv("TESSERA_DATA_CACHE") ? fs::path(std::getenv("TESSERA_DATA_CACHE"))
                                                    : kRepoRoot / "data-cache";
  fs::path vocab = dir / "bert" / "bert-base-uncased-vocab.txt";
  fs::path node_modules = dir / "npm-bert" / "node_modules";
  fs::path brown = dir / "brown" / "brown.jsonl";
};

struct Doc {
  std::string name;
  std::string text;
};

std::vector<std::string> brown_texts() {
  std::vector<std::string> texts;
  std::istringstream in(read_file(BertCache().brown));
  for (std::string line; std::getline(in, line);) texts.push_back(nlohmann::json::parse(line).at("text"));
  return texts;
}

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

// Brown's held-out documents (the last 100 of 500, 1.2 MB; the cased vocabulary is trained on the
// others), the hard cases whole and line by line, every code point, random bytes.
std::vector<Doc> build_corpus() {
  std::vector<Doc> docs;
  const auto brown = brown_texts();
  for (size_t i = 400; i < brown.size(); ++i) docs.push_back({"brown #" + std::to_string(i), brown[i]});
  const std::string hard = read_file(kRepoRoot / "src" / "data" / "testdata" / "bert_hard_cases.txt");
  docs.push_back({"bert_hard_cases.txt", hard});
  std::istringstream lines(hard);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) docs.push_back({"bert_hard_cases.txt:" + std::to_string(n), line});
  // Each code point after a letter, alone, and before a letter, so that its class shows (removed,
  // whitespace, punctuation, CJK, decomposed, lowercased). Surrogates are not text.
  std::string cps;
  for (char32_t c = 1; c <= 0x10FFFF; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    if (c >= 0x40000 && c < 0xE0000 && c % 97) continue;  // planes 4-13 are unassigned: a sample
    const std::string u = utf8(c);
    cps.append("a").append(u).append(" ").append(u).append("b ");
    if (cps.size() > 4000) docs.push_back({"code points to U+" + std::to_string(c), std::exchange(cps, "")});
  }
  docs.push_back({"code points (last)", cps});
  std::mt19937 rng(20240229);
  for (int i = 0; i < 200; ++i) {
    std::string s;
    for (int k = 0; k < 200; ++k) s += (i % 2) ? static_cast<char>(rng()) : "ab [MASK] \xC3\xA9\x80."[rng() % 16];
    docs.push_back({"random #" + std::to_string(i), s});
  }
  return docs;
}

const std::vector<Doc>& corpus() {
  static const std::vector<Doc> docs = build_corpus();
  return docs;
}

std::string node_command(const std::string& args) {
  return "node '" + (kRepoRoot / "src" / "data" / "testdata" / "bert_reference.js").string() + "' " + args;
}

std::vector<std::vector<int32_t>> run_reference(const fs::path& vocab, bool lower_case) {
  TempDir tmp;
  std::string input;
  for (const auto& d : corpus()) {
    const uint32_t n = static_cast<uint32_t>(d.text.size());
    input.append(reinterpret_cast<const char*>(&n), 4);
    input += d.text;
  }
  write_file(tmp.path / "in.bin", input);
  const std::string cmd = node_command("encode '" + BertCache().node_modules.string() + "' '" + vocab.string() +
                                       "' " + (lower_case ? "lower" : "cased") + " '" + (tmp.path / "in.bin").string() +
                                       "' '" + (tmp.path / "out.bin").string() + "' 2> '" +
                                       (tmp.path / "err.txt").string() + "'");
  TESSERA_CHECK(std::system(cmd.c_str()) == 0, cmd, " failed:\n", read_file(tmp.path / "err.txt"));
  const std::string out = read_file(tmp.path / "out.bin");
  std::vector<std::vector<int32_t>> results;
  for (size_t pos = 0; pos < out.size();) {
    uint32_t n;
    TESSERA_CHECK(pos + 4 <= out.size(), "reference output is truncated");
    std::memcpy(&n, out.data() + pos, 4);
    TESSERA_CHECK(pos + 4 + 4 * size_t{n} <= out.size(), "reference output is truncated");
    results.emplace_back(n);
    std::memcpy(results.back().data(), out.data() + pos + 4, 4 * size_t{n});
    pos += 4 + 4 * size_t{n};
  }
  TESSERA_CHECK(results.size() == corpus().size(), "reference gave ", results.size(), " results for ",
                corpus().size(), " documents");
  return results;
}

std::string show(const BertWordPieceTokenizer& t, const std::vector<int32_t>& ids, size_t from) {
  std::string s;
  for (size_t i = from; i < std::min(ids.size(), from + 12); ++i) s += t.token(ids[i]) + " ";
  return s;
}

void expect_parity(const fs::path& vocab, bool lower_case) {
  BertWordPieceTokenizer ours(vocab.string(), lower_case);
  const auto expected = run_reference(vocab, lower_case);
  size_t bytes = 0, tokens = 0, unknown = 0;
  int failures = 0;
  for (size_t i = 0; i < corpus().size(); ++i) {
    const auto got = ours.encode(corpus()[i].text);
    bytes += corpus()[i].text.size();
    tokens += got.size();
    unknown += std::count(got.begin(), got.end(), ours.unk());
    if (got == expected[i]) continue;
    size_t k = 0;
    while (k < got.size() && k < expected[i].size() && got[k] == expected[i][k]) ++k;
    const size_t from = k < 3 ? 0 : k - 3;
    if (++failures <= 8) {
      ADD_FAILURE() << corpus()[i].name << " (" << vocab.filename() << ", " << ours.name() << "): first difference at token "
                    << k << "\n  ours:      " << show(ours, got, from) << "\n  reference: " << show(ours, expected[i], from);
    }
  }
  EXPECT_EQ(failures, 0) << "documents that differ";
  std::cout << ours.name() << " with " << vocab.filename() << ": " << corpus().size() << " documents, " << bytes
            << " bytes, " << tokens << " tokens (" << unknown << " [UNK]); documents whose ids differ from "
            << "Hugging Face's: " << failures << "\n";
  EXPECT_GT(bytes, size_t{1} << 20);
}

class BertReference : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const fs::path& p : {cache_.vocab, cache_.node_modules / "tokenizers" / "package.json", cache_.brown}) {
      if (!fs::exists(p)) {
        GTEST_SKIP() << p << " is missing: scripts/setup.sh runs scripts/fetch_bert_vocab.sh and "
                     << "scripts/fetch_brown.sh (the cache is $TESSERA_DATA_CACHE, default data-cache/)";
      }
    }
    if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node not found (apt-get install nodejs)";
  }
  BertCache cache_;
};

TEST_F(BertReference, UncasedBertBaseVocabulary) { expect_parity(cache_.vocab, true); }
TEST_F(BertReference, CasedBertBaseVocabulary) { expect_parity(cache_.vocab, false); }

// A cased vocabulary trained by the reference on Brown's first 400 documents; the specials it lacks
// are put first.
TEST_F(BertReference, CasedVocabularyTrainedByReference) {
  TempDir tmp;
  std::string train;
  const auto brown = brown_texts();
  for (size_t i = 0; i < 400; ++i) train += brown[i] + "\n";
  write_file(tmp.path / "train.txt", train);
  const std::string cmd = node_command("train '" + cache_.node_modules.string() + "' '" +
                                       (tmp.path / "train.txt").string() + "' cased '" +
                                       (tmp.path / "trained.txt").string() + "'");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n" + read_file(tmp.path / "trained.txt");
  write_file(tmp.path / "vocab.txt", vocab);
  ASSERT_GT(std::count(vocab.begin(), vocab.end(), '\n'), 10000);
  expect_parity(tmp.path / "vocab.txt", false);
}

}  // namespace
}  // namespace tessera::data
