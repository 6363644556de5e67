// Tests of the SentencePiece tokenizers and of training: tiny BPE and unigram models (vocabulary 500)
// are trained once on the first 200 KB of the shared WikiText validation text, then loaded in
// Megatron's three flavors. SentencePiece normalises text, so round trips are checked against the
// processor's own DecodeIds(EncodeAsIds(x)), and exactly only for text normalisation leaves alone, or
// for a model trained to be lossless (identity normalisation, byte fallback).
#include "data/sentencepiece_tokenizer.h"

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "core/testing.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;

const fs::path kRepoRoot = fs::path(__FILE__).parent_path().parent_path().parent_path();

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in, "cannot read ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& path, std::string_view data) {
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  TESSERA_CHECK(out, "cannot write ", path);
}

using ::tessera::testing::error_of;

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Sentences from the corpus, plus text of other kinds.
const std::vector<std::string> kSamples = {
    "The quick brown fox jumps over the lazy dog.",
    "In 1996, the city of Meridian had a population of 41,000 people.",
    " = Valkyria Chronicles III = ",
    "  leading, trailing   and    repeated spaces  ",
    "tabs\tand\nnewlines\r\nand a form feed\f",
    "Ünïcödé: naïve café, Ωμέγα, Москва, 日本語, 😀, e\xcc\x81",
    "full-width ＡＢＣ１２３ and ligature ﬁ (NFKC changes them)",
    "",
    "a",
};

// CTest runs each test in a process of its own, so the two models are trained once into a cache in the
// temporary directory, keyed by a hash of the corpus, and reused (training is deterministic; a model is
// written under a private name and renamed into place, so concurrent test processes are safe).
constexpr const char* kCacheVersion = "spm-test-v1";

class SentencePieceTest : public ::testing::Test {
 protected:
  static fs::path dir_;    // this process's scratch directory
  static fs::path cache_;  // models shared between test processes
  static std::string corpus_path_;

  static void SetUpTestSuite() {
    const fs::path source = kRepoRoot / "data" / "eval" / "wiki.valid.tokens";
    std::string text = read_file(source);
    text.resize(std::min<size_t>(text.size(), 200 * 1000));
    text.resize(text.rfind('\n') + 1);  // whole lines
    std::ostringstream key;
    key << std::hex << std::hash<std::string>{}(text + kCacheVersion);
    cache_ = fs::temp_directory_path() / ("tessera_spm_test_cache_" + key.str());
    dir_ = fs::temp_directory_path() / ("tessera_spm_test_" + std::to_string(::getpid()));
    fs::create_directories(cache_);
    fs::create_directories(dir_);
    corpus_path_ = (dir_ / "corpus.txt").string();
    write_file(corpus_path_, text);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  static SentencePieceTrainOptions base_options(const std::string& type) {
    SentencePieceTrainOptions o;
    o.input = {corpus_path_};
    o.model_prefix = (dir_ / type).string();
    o.vocab_size = 500;
    o.model_type = type;
    o.num_threads = 2;
    return o;
  }

  // The cached model of `type` (bpe or unigram), trained from base_options(type) if not cached yet.
  static std::string model(const std::string& type) {
    const fs::path cached = cache_ / (type + ".model");
    if (!fs::exists(cached)) {
      SentencePieceTrainOptions o = base_options(type);
      auto result = train_sentencepiece(o);
      EXPECT_EQ(result.model_path, o.model_prefix + ".model");
      EXPECT_EQ(result.vocab_path, o.model_prefix + ".vocab");
      const std::string tmp = "." + std::to_string(::getpid()) + ".tmp";
      fs::copy_file(result.vocab_path, cache_ / (type + ".vocab" + tmp), fs::copy_options::overwrite_existing);
      fs::rename(cache_ / (type + ".vocab" + tmp), cache_ / (type + ".vocab"));
      fs::copy_file(result.model_path, cache_ / (type + ".model" + tmp), fs::copy_options::overwrite_existing);
      fs::rename(cache_ / (type + ".model" + tmp), cached);
    }
    return cached.string();
  }
};

fs::path SentencePieceTest::dir_;
fs::path SentencePieceTest::cache_;
std::string SentencePieceTest::corpus_path_;

TEST_F(SentencePieceTest, TrainedModelsHaveTheVocabularyAndSpecialIdsAsked) {
  for (const char* type : {"bpe", "unigram"}) {
    SCOPED_TRACE(type);
    SentencePieceTokenizer gpt(model(type), SentencePieceFlavor::kGpt);
    EXPECT_TRUE(fs::exists(cache_ / (std::string(type) + ".vocab")));
    EXPECT_EQ(gpt.name(), "GPTSentencePieceTokenizer");
    EXPECT_EQ(gpt.piece_size(), 500);
    EXPECT_EQ(gpt.vocab_size(), 500);
    EXPECT_EQ(gpt.unk(), 0);
    EXPECT_EQ(gpt.bos(), 1);
    EXPECT_EQ(gpt.eos(), 2);
    EXPECT_EQ(gpt.pad(), -1);
    EXPECT_EQ(gpt.eod(), 2);  // Megatron's GPTSentencePieceTokenizer: eod is the model's eos
    EXPECT_EQ(gpt.cls(), -1);
    EXPECT_EQ(gpt.id_to_piece(0), "<unk>");
    EXPECT_EQ(gpt.id_to_piece(2), "</s>");
  }
}

TEST_F(SentencePieceTest, MegatronFlavorAddsSpecialTokensAfterThePieces) {
  // Megatron's _SentencePieceTokenizer on a default model of N pieces: <CLS> N, <SEP> N+1, <EOD> N+2,
  // <MASK> N+3, <PAD> N+4 (the model has no pad); <s> and </s> are the model's own 1 and 2.
  SentencePieceTokenizer t(model("bpe"));
  EXPECT_EQ(t.name(), "SentencePieceTokenizer");
  EXPECT_EQ(t.flavor(), SentencePieceFlavor::kMegatron);
  EXPECT_EQ(t.piece_size(), 500);
  EXPECT_EQ(t.vocab_size(), 505);
  EXPECT_EQ(t.cls(), 500);
  EXPECT_EQ(t.sep(), 501);
  EXPECT_EQ(t.eod(), 502);
  EXPECT_EQ(t.mask(), 503);
  EXPECT_EQ(t.pad(), 504);
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_EQ(t.id_to_piece(502), "<EOD>");
  EXPECT_EQ(t.id_to_piece(504), "<PAD>");

  SentencePieceTokenizer extra(model("bpe"), SentencePieceFlavor::kMegatron, 3);
  EXPECT_EQ(extra.vocab_size(), 508);
  EXPECT_EQ(extra.id_to_piece(507), "<extra_id_2>");
  EXPECT_EQ(extra.encode("<extra_id_1>"), std::vector<int32_t>{506});
}

TEST_F(SentencePieceTest, EncodeAndDecodeFollowTheProcessor) {
  for (const char* type : {"bpe", "unigram"}) {
    SCOPED_TRACE(type);
    sentencepiece::SentencePieceProcessor sp;
    ASSERT_TRUE(sp.Load(model(type)).ok());
    SentencePieceTokenizer megatron(model(type));
    SentencePieceTokenizer gpt(model(type), SentencePieceFlavor::kGpt);
    SentencePieceTokenizer llama(model(type), SentencePieceFlavor::kLlama2);
    std::vector<std::string> samples = kSamples;
    std::istringstream corpus(read_file(corpus_path_));
    std::string line;
    for (int i = 0; i < 200 && std::getline(corpus, line); ++i) samples.push_back(line);
    for (const auto& x : samples) {
      SCOPED_TRACE(x);
      std::vector<int> ref_ids = sp.EncodeAsIds(x);
      std::vector<int32_t> ref(ref_ids.begin(), ref_ids.end());
      const std::string ref_text = sp.DecodeIds(ref_ids);
      EXPECT_EQ(gpt.encode(x), ref);
      EXPECT_EQ(megatron.encode(x), ref);  // no special token strings in these samples
      EXPECT_EQ(llama.encode(x), cat({{1}, ref}));
      EXPECT_EQ(gpt.decode(ref), ref_text);
      EXPECT_EQ(megatron.decode(ref), ref_text);
      EXPECT_EQ(llama.decode(llama.encode(x)), ref_text);  // bos is a control piece: decodes to ""
      for (int32_t id : ref) ASSERT_TRUE(id >= 0 && id < gpt.vocab_size());
    }
  }
}

TEST_F(SentencePieceTest, PlainTextRoundTripsExactly) {
  // Text that nmt_nfkc leaves alone (single spaces, no leading or trailing ones, NFKC-stable) and whose
  // characters the model covers comes back byte for byte.
  for (const char* type : {"bpe", "unigram"}) {
    SentencePieceTokenizer t(model(type));
    for (const std::string x : {"The quick brown fox jumps over the lazy dog.",
                                "In 1996, the city of Meridian had a population of 41,000 people.",
                                "It was the best of times, it was the worst of times."}) {
      EXPECT_EQ(t.decode(t.encode(x)), x) << type;
    }
    // What normalisation changes: whitespace is collapsed and trimmed, NFKC folds ﬁ into "fi".
    EXPECT_EQ(t.decode(t.encode("  two   spaces  ")), "two spaces") << type;
    EXPECT_EQ(t.decode(t.encode("ﬁne")), "fine") << type;
    EXPECT_TRUE(t.encode("").empty());
  }
}

TEST_F(SentencePieceTest, MegatronFlavorSplitsTextAtSpecialTokens) {
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(model("unigram")).ok());
  auto enc = [&](const std::string& s) {
    std::vector<int> ids = sp.EncodeAsIds(s);
    return std::vector<int32_t>(ids.begin(), ids.end());
  };
  auto dec = [&](const std::vector<int32_t>& ids) { return sp.DecodeIds(std::vector<int>(ids.begin(), ids.end())); };
  SentencePieceTokenizer t(model("unigram"));
  const int32_t eod = t.eod();
  // Each piece of text between special tokens is encoded on its own (with its own dummy prefix).
  EXPECT_EQ(t.encode("first document<EOD>second one"), cat({enc("first document"), {eod}, enc("second one")}));
  EXPECT_EQ(t.encode("<s>text</s>"), cat({{1}, enc("text"), {2}}));
  EXPECT_EQ(t.encode("<EOD><EOD>"), (std::vector<int32_t>{eod, eod}));
  EXPECT_EQ(t.encode("a<SEP>b<CLS>c<MASK><PAD>"),
            cat({enc("a"), {t.sep()}, enc("b"), {t.cls()}, enc("c"), {t.mask(), t.pad()}}));
  EXPECT_EQ(t.encode("<EOD"), enc("<EOD"));  // only whole special strings count
  EXPECT_EQ(t.encode("<unk>"), enc("<unk>"));  // unk is not one of Megatron's special tokens

  // decode: " <EOD> " after the decoded text before it, as Megatron's detokenize.
  const auto ids = t.encode("first document<EOD>second one");
  EXPECT_EQ(t.decode(ids), dec(enc("first document")) + " <EOD> " + dec(enc("second one")));
  EXPECT_EQ(t.decode(ids), "first document <EOD> second one");
  EXPECT_EQ(t.decode(std::vector<int32_t>{eod}), " <EOD> ");
  EXPECT_EQ(t.decode(std::vector<int32_t>{1, 2}), " <s>  </s> ");
}

TEST_F(SentencePieceTest, ModelWithoutBosOrEos) {
  // bos and eos disabled, pad at 3: Megatron adds <BOS> and <EOS> and takes the model's <pad>.
  SentencePieceTrainOptions o = base_options("bpe");
  o.model_prefix = (dir_ / "nobos").string();
  o.vocab_size = 300;
  o.bos_id = -1;
  o.eos_id = -1;
  o.pad_id = 3;
  train_sentencepiece(o);
  SentencePieceTokenizer t(o.model_prefix + ".model");
  EXPECT_EQ(t.piece_size(), 300);
  EXPECT_EQ(t.pad(), 3);
  EXPECT_EQ(t.id_to_piece(3), "<pad>");
  EXPECT_EQ(t.eod(), 302);
  EXPECT_EQ(t.bos(), 304);
  EXPECT_EQ(t.eos(), 305);
  EXPECT_EQ(t.vocab_size(), 306);
  EXPECT_EQ(t.id_to_piece(305), "<EOS>");

  SentencePieceTokenizer gpt(o.model_prefix + ".model", SentencePieceFlavor::kGpt);
  EXPECT_EQ(gpt.eos(), -1);
  EXPECT_NE(error_of([&] { gpt.eod(); }).find("has none"), std::string::npos);
  const std::string e = error_of([&] { SentencePieceTokenizer(o.model_prefix + ".model", SentencePieceFlavor::kLlama2); });
  EXPECT_NE(e.find("no bos piece"), std::string::npos) << e;
}

TEST_F(SentencePieceTest, LosslessModelRoundTripsAnyUtf8) {
  SentencePieceTrainOptions o = base_options("bpe");
  o.model_prefix = (dir_ / "lossless").string();
  o.normalization_rule_name = "identity";
  o.remove_extra_whitespaces = false;
  o.byte_fallback = true;
  o.user_defined_symbols = {"<|user|>", "<|assistant|>"};
  train_sentencepiece(o);
  SentencePieceTokenizer t(o.model_prefix + ".model", SentencePieceFlavor::kGpt);
  EXPECT_EQ(t.id_to_piece(3), "<|user|>");
  for (const auto& x : kSamples) EXPECT_EQ(t.decode(t.encode(x)), x);
  EXPECT_EQ(t.decode(t.encode("<|user|>hi")), "<|user|>hi");
  // U+2581, SentencePiece's stand-in for the space, comes back as a space (found by fuzzing).
  EXPECT_EQ(t.decode(t.encode("J\u2581x")), "J x");
  // Invalid UTF-8: each ill-formed byte is read as U+FFFD.
  EXPECT_EQ(t.decode(t.encode("a\xff" "b\xe2\x82")), "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd");
}

TEST_F(SentencePieceTest, TrainingIsDeterministic) {
  // On 40 KB of the corpus, sampling lines at random. The .model records its prefix; the pieces and
  // scores (.vocab) must match.
  const std::string small = (dir_ / "small.txt").string();
  std::string text = read_file(corpus_path_).substr(0, 40000);
  write_file(small, text.substr(0, text.rfind('\n') + 1));
  for (const char* type : {"bpe", "unigram"}) {
    SentencePieceTrainOptions o = base_options(type);
    o.input = {small};
    o.vocab_size = 300;
    o.input_sentence_size = 120;
    o.model_prefix = (dir_ / (std::string(type) + "_again")).string();
    auto first = train_sentencepiece(o);
    const std::string vocab = read_file(first.vocab_path);
    o.model_prefix += "2";
    auto second = train_sentencepiece(o);
    EXPECT_EQ(read_file(second.vocab_path), vocab) << type;
    EXPECT_EQ(SentencePieceTokenizer(second.model_path).piece_size(), 300) << type;
  }
}

TEST_F(SentencePieceTest, EncodeIsThreadSafe) {
  SentencePieceTokenizer t(model("unigram"));
  std::vector<std::vector<int32_t>> expected;
  for (const auto& x : kSamples) expected.push_back(t.encode(x + "<EOD>" + x));
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 50; ++rep)
        for (size_t i = 0; i < kSamples.size(); ++i)
          if (t.encode(kSamples[i] + "<EOD>" + kSamples[i]) != expected[i]) ++bad[k];
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

TEST_F(SentencePieceTest, BadModelFilesNameThePath) {
  const std::string missing = (dir_ / "no_such.model").string();
  std::string e = error_of([&] { SentencePieceTokenizer t(missing); });
  EXPECT_NE(e.find(missing), std::string::npos) << e;
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;

  const std::string garbage = (dir_ / "garbage.model").string();
  write_file(garbage, "this is not a protobuf \xff\xfe\x01\x02");
  e = error_of([&] { SentencePieceTokenizer t(garbage); });
  EXPECT_NE(e.find(garbage), std::string::npos) << e;

  const std::string truncated = (dir_ / "truncated.model").string();
  const std::string real = read_file(model("bpe"));
  write_file(truncated, real.substr(0, real.size() / 2));
  e = error_of([&] { SentencePieceTokenizer t(truncated); });
  EXPECT_NE(e.find(truncated), std::string::npos) << e;

  const std::string empty = (dir_ / "empty.model").string();
  write_file(empty, "");
  e = error_of([&] { SentencePieceTokenizer t(empty); });
  EXPECT_NE(e.find(empty), std::string::npos) << e;

  e = error_of([&] { SentencePieceTokenizer t(dir_.string()); });
  EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;

  e = error_of([&] { SentencePieceTokenizer t(model("bpe"), SentencePieceFlavor::kGpt, 2); });
  EXPECT_NE(e.find("--vocab-extra-ids"), std::string::npos) << e;
}

TEST_F(SentencePieceTest, DecodeRejectsIdsOutsideTheVocabulary) {
  SentencePieceTokenizer megatron(model("bpe"));
  SentencePieceTokenizer gpt(model("bpe"), SentencePieceFlavor::kGpt);
  EXPECT_NO_THROW(megatron.decode(std::vector<int32_t>{504}));
  EXPECT_NE(error_of([&] { megatron.decode(std::vector<int32_t>{5, 505}); }).find("token id 505 at position 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { gpt.decode(std::vector<int32_t>{500}); }).find("outside the vocabulary [0, 500)"),
            std::string::npos);
  EXPECT_THROW(gpt.decode(std::vector<int32_t>{-1}), Error);
  EXPECT_THROW(gpt.id_to_piece(500), Error);
}

TEST_F(SentencePieceTest, BadTrainingOptionsNameTheFlag) {
  auto expect_error = [&](const std::string& needle, auto&& edit) {
    SentencePieceTrainOptions o = base_options("bpe");
    o.model_prefix = (dir_ / "bad").string();
    edit(o);
    const std::string e = error_of([&] { train_sentencepiece(o); });
    EXPECT_NE(e.find(needle), std::string::npos) << "wanted '" << needle << "' in: '" << e << "'";
  };
  expect_error("--input: give at least one", [](auto& o) { o.input.clear(); });
  expect_error("--input: '/nonexistent/x.txt' does not exist", [](auto& o) { o.input.push_back("/nonexistent/x.txt"); });
  expect_error("is not a regular file", [&](auto& o) { o.input = {dir_.string()}; });
  expect_error("--model-prefix: give", [](auto& o) { o.model_prefix.clear(); });
  expect_error("directory '/nonexistent/dir' does not exist", [](auto& o) { o.model_prefix = "/nonexistent/dir/m"; });
  expect_error("--model-type must be bpe or unigram, got 'word'", [](auto& o) { o.model_type = "word"; });
  expect_error("--vocab-size must be positive, got 0", [](auto& o) { o.vocab_size = 0; });
  expect_error("--character-coverage must be in [0.98, 1]", [](auto& o) { o.character_coverage = 0.5; });
  expect_error("--input-sentence-size", [](auto& o) { o.input_sentence_size = 50; });
  expect_error("--max-sentence-length", [](auto& o) { o.max_sentence_length = 5; });
  expect_error("--num-threads", [](auto& o) { o.num_threads = -1; });
  expect_error("--normalization-rule-name must be one of", [](auto& o) { o.normalization_rule_name = "nfd"; });
  expect_error("--unk-id must be >= 0", [](auto& o) { o.unk_id = -1; });
  expect_error("--eos-id and --bos-id are both 1", [](auto& o) { o.eos_id = 1; });
  expect_error("--pad-id 600 must be -1 (none) or in [0, --vocab-size 500)", [](auto& o) { o.pad_id = 600; });
  expect_error("--user-defined-symbols: symbol 'a,b' contains a comma", [](auto& o) { o.user_defined_symbols = {"a,b"}; });
  expect_error("--user-defined-symbols: 'x' is given twice", [](auto& o) { o.user_defined_symbols = {"x", "x"}; });
  expect_error("256 byte pieces for --byte-fallback", [](auto& o) {
    o.byte_fallback = true;
    o.vocab_size = 200;
  });
  // Failures inside SentencePiece carry its message.
  // SentencePiece's "Vocabulary size too high (100000). Please set it to a value <= N.", and a hint.
  expect_error(". (lower --vocab-size or give more text)", [](auto& o) {
    o.model_type = "unigram";  // finds out sooner than bpe
    o.vocab_size = 100000;
  });
  const std::string blank = (dir_ / "blank.txt").string();
  write_file(blank, "\n\n\n");
  expect_error("--input: no text to train on", [&](auto& o) { o.input = {blank}; });
  EXPECT_FALSE(fs::exists(dir_ / "bad.model"));
}

TEST(SentencePieceFlavorTest, FromTokenizerTypeName) {
  EXPECT_EQ(sentencepiece_flavor_from_name("SentencePieceTokenizer"), SentencePieceFlavor::kMegatron);
  EXPECT_EQ(sentencepiece_flavor_from_name("GPTSentencePieceTokenizer"), SentencePieceFlavor::kGpt);
  EXPECT_EQ(sentencepiece_flavor_from_name("Llama2Tokenizer"), SentencePieceFlavor::kLlama2);
  EXPECT_EQ(sentencepiece_flavor_from_name("GPT2BPETokenizer"), std::nullopt);
}

}  // namespace
}  // namespace tessera::data
