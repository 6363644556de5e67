// The RACE reader and Megatron's sequence builder on hand-written RACE-format files and a small
// vocabulary; expected values worked out by hand from tasks/race/data.py and tasks/data_utils.py
// (clean_text's by running Megatron's function in Python).
#include "tasks/race_dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/check.h"
#include "data/bert_wordpiece_tokenizer.h"

namespace tessera::tasks {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "race_XXXXXX").string();
    TESSERA_CHECK(mkdtemp(templ.data()) != nullptr, "mkdtemp failed");
    path = templ;
  }
  ~TempDir() { fs::remove_all(path); }
};

void write_file(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST(RaceCleanText, AsMegatron) {
  EXPECT_EQ(clean_text("a\nb"), "a b");
  EXPECT_EQ(clean_text(" a \t\n  b "), " a b ");
  EXPECT_EQ(clean_text("end . Next"), "end. Next");
  // Three passes of a non-overlapping replace, not "until nothing changes".
  EXPECT_EQ(clean_text("x . . . . . . . y"), "x. .. .. .. y");
  // Python's \s: no-break space and ideographic space are whitespace, a zero-width space is not.
  EXPECT_EQ(clean_text("a\u00a0\u3000b\u200bc"), "a b\u200bc");
  EXPECT_EQ(clean_text("The cat sat on the mat.\nThe dog sat ."), "The cat sat on the mat. The dog sat .");
}

constexpr int32_t kCls = 2, kSep = 3, kPad = 0;

TEST(RaceSequences, PairPaddedWithTypesAndMask) {
  const std::vector<int32_t> a{5, 6}, b{7, 8, 9};
  const TokensTypesPaddings t = build_tokens_types_paddings(a, &b, 10, kCls, kSep, kPad);
  EXPECT_EQ(t.ids, (std::vector<int32_t>{2, 5, 6, 3, 7, 8, 9, 3, 0, 0}));
  EXPECT_EQ(t.types, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(t.paddings, (std::vector<int32_t>{1, 1, 1, 1, 1, 1, 1, 1, 0, 0}));
  // Megatron pads the token types with the pad id.
  const TokensTypesPaddings odd = build_tokens_types_paddings(a, &b, 10, kCls, kSep, 9);
  EXPECT_EQ(odd.ids, (std::vector<int32_t>{2, 5, 6, 3, 7, 8, 9, 3, 9, 9}));
  EXPECT_EQ(odd.types, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1, 9, 9}));
}

TEST(RaceSequences, TruncationCutsTheContextEndAndKeepsTheLastSep) {
  const std::vector<int32_t> a{5, 6}, b{7, 8, 9, 10, 11};
  TokensTypesPaddings t = build_tokens_types_paddings(a, &b, 8, kCls, kSep, kPad);
  EXPECT_EQ(t.ids, (std::vector<int32_t>{2, 5, 6, 3, 7, 8, 9, 3}));
  EXPECT_EQ(t.types, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(t.paddings, std::vector<int32_t>(8, 1));
  // [CLS] a [SEP] b of exactly max_seq_length ids is cut too (len >= max): b loses its last id.
  const std::vector<int32_t> a1{5}, b3{7, 8, 9};
  t = build_tokens_types_paddings(a1, &b3, 6, kCls, kSep, kPad);
  EXPECT_EQ(t.ids, (std::vector<int32_t>{2, 5, 3, 7, 8, 3}));
  // One shorter fits whole.
  const std::vector<int32_t> b2{7, 8};
  t = build_tokens_types_paddings(a1, &b2, 6, kCls, kSep, kPad);
  EXPECT_EQ(t.ids, (std::vector<int32_t>{2, 5, 3, 7, 8, 3}));
  EXPECT_EQ(t.types, (std::vector<int32_t>{0, 0, 0, 1, 1, 1}));
}

TEST(RaceSequences, SingleText) {
  const std::vector<int32_t> a{5, 6};
  TokensTypesPaddings t = build_tokens_types_paddings(a, nullptr, 6, kCls, kSep, kPad);
  EXPECT_EQ(t.ids, (std::vector<int32_t>{2, 5, 6, 3, 0, 0}));
  EXPECT_EQ(t.paddings, (std::vector<int32_t>{1, 1, 1, 1, 0, 0}));
  // Cut: the [SEP] after a is gone, a [SEP] of type 0 closes the sequence.
  const std::vector<int32_t> a5{5, 6, 7, 8, 9};
  t = build_tokens_types_paddings(a5, nullptr, 6, kCls, kSep, kPad);
  EXPECT_EQ(t.ids, (std::vector<int32_t>{2, 5, 6, 7, 8, 3}));
  EXPECT_EQ(t.types, std::vector<int32_t>(6, 0));
}

TEST(RaceDatasetName, AfterTheLastRace) {
  EXPECT_EQ(race_dataset_name("/data/RACE/dev/middle"), "dev-middle");
  EXPECT_EQ(race_dataset_name("/data/RACE/test/high/"), "test-high");
  EXPECT_EQ(race_dataset_name("/RACE/x/RACE/dev/high"), "dev-high");
  EXPECT_EQ(race_dataset_name("a/b"), "a-b");
}

class RaceFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<std::string> pieces = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the",  "cat",  "sat",
                                             "on",    "mat",   ".",     "dog",   "where",  "did",  "sit",  "?",
                                             "tree",  "sky",   "red",   "is",    "what",   "color"};
    std::string vocab;
    for (size_t i = 0; i < pieces.size(); ++i) {
      vocab += pieces[i] + "\n";
      id_[pieces[i]] = static_cast<int32_t>(i);
    }
    write_file(dir_.path / "vocab.txt", vocab);
    tokenizer_ = std::make_unique<data::BertWordPieceTokenizer>((dir_.path / "vocab.txt").string(), true);
    fs::create_directories(dir_.path / "RACE" / "dev" / "middle");
    data_ = dir_.path / "RACE" / "dev" / "middle";
  }
  std::vector<int32_t> ids(const std::string& words) const {
    std::vector<int32_t> out;
    std::istringstream in(words);
    for (std::string w; in >> w;) out.push_back(id_.at(w));
    return out;
  }
  // [CLS] qa [SEP] context [SEP], padded to seq.
  std::vector<int32_t> sequence(const std::string& qa, const std::string& context, size_t seq) const {
    std::vector<int32_t> out{kCls};
    for (int32_t i : ids(qa)) out.push_back(i);
    out.push_back(kSep);
    for (int32_t i : ids(context)) out.push_back(i);
    out.push_back(kSep);
    out.resize(seq, kPad);
    return out;
  }

  TempDir dir_;
  fs::path data_;
  std::map<std::string, int32_t> id_;
  std::unique_ptr<data::BertWordPieceTokenizer> tokenizer_;
};

TEST_F(RaceFiles, ClozeAndPlainQuestions) {
  // Read in sorted file order: b.txt's article after a.txt's; other files are not read.
  write_file(data_ / "b.txt",
             R"({"article": "The sky is red.", "questions": ["What color is the sky?"], )"
             R"("options": [["tree", "red", "sky", "dog"]], "answers": ["B"], "id": "b.txt"})"
             "\n");
  write_file(data_ / "a.txt",
             R"({"article": "The cat sat on the mat.\nThe dog   sat .", )"
             R"("questions": ["Where did the cat sit?", "The _ sat on the mat."], )"
             R"("options": [["mat", "tree", "sky", "dog"], ["dog", "cat", "sky", "tree"]], "answers": ["A", "B"], )"
             R"("id": "a.txt"})"
             "\n");
  write_file(data_ / "notes.json", "not RACE");
  RaceReadStats stats;
  const std::vector<MultipleChoiceSample> s = read_race_directory(data_.string(), *tokenizer_, 32, &stats);
  EXPECT_EQ(stats.documents, 2);
  EXPECT_EQ(stats.questions, 3);
  EXPECT_EQ(stats.samples, 3);
  ASSERT_EQ(s.size(), 3u);
  const std::string context = "the cat sat on the mat . the dog sat .";
  // Plain question: question + " " + option.
  EXPECT_EQ(s[0].label, 0);
  EXPECT_EQ(s[0].uid, 0);
  ASSERT_EQ(s[0].choices.size(), 4u);
  const char* options0[] = {"mat", "tree", "sky", "dog"};
  for (int c = 0; c < 4; ++c) {
    const std::string qa = std::string("where did the cat sit ? ") + options0[c];
    EXPECT_EQ(s[0].choices[c].ids, sequence(qa, context, 32)) << "choice " << c;
    const size_t qa_len = ids(qa).size(), ctx_len = ids(context).size();
    std::vector<int32_t> types(32, 0), paddings(32, 0);
    for (size_t j = 0; j < 2 + qa_len + ctx_len + 1; ++j) paddings[j] = 1;
    for (size_t j = 2 + qa_len; j < 2 + qa_len + ctx_len + 1; ++j) types[j] = 1;
    EXPECT_EQ(s[0].choices[c].types, types);
    EXPECT_EQ(s[0].choices[c].paddings, paddings);
  }
  // Cloze: every "_" replaced by the option.
  EXPECT_EQ(s[1].label, 1);
  EXPECT_EQ(s[1].uid, 1);
  const char* options1[] = {"dog", "cat", "sky", "tree"};
  for (int c = 0; c < 4; ++c)
    EXPECT_EQ(s[1].choices[c].ids, sequence(std::string("the ") + options1[c] + " sat on the mat .", context, 32));
  EXPECT_EQ(s[2].label, 1);
  EXPECT_EQ(s[2].choices[1].ids, sequence("what color is the sky ? red", "the sky is red .", 32));
}

TEST_F(RaceFiles, TruncatesQaAndContext) {
  write_file(data_ / "a.txt",
             R"({"article": "the cat sat on the mat", "questions": ["where did the cat sit ?"], )"
             R"("options": [["mat", "tree", "sky", "dog"]], "answers": ["D"]})"
             "\n");
  // qa cut to 3 ids; [CLS] 3 [SEP] 6 context = 11 >= 10: cut to 9, then [SEP].
  const std::vector<MultipleChoiceSample> s = read_race_directory(data_.string(), *tokenizer_, 10, nullptr, 3);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].label, 3);
  EXPECT_EQ(s[0].choices[2].ids, (std::vector<int32_t>{kCls, id_["where"], id_["did"], id_["the"], kSep, id_["the"],
                                                       id_["cat"], id_["sat"], id_["on"], kSep}));
  EXPECT_EQ(s[0].choices[2].types, (std::vector<int32_t>{0, 0, 0, 0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(s[0].choices[2].paddings, std::vector<int32_t>(10, 1));
}

void expect_error(const std::function<void()>& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST_F(RaceFiles, ErrorsNameTheFileAndLine) {
  const std::string ok = R"({"article": "the cat", "questions": ["q"], "options": [["a", "b", "c", "d"]], )"
                         R"("answers": ["A"]})";
  auto read = [&](const std::string& second_line) {
    write_file(data_ / "a.txt", ok + "\n" + second_line + "\n");
    return [&] { read_race_directory(data_.string(), *tokenizer_, 16); };
  };
  const std::string at = (data_ / "a.txt").string() + ":2";
  expect_error(read("{not json"), at + ": not a JSON object");
  expect_error(read(R"({"questions": [], "options": [], "answers": []})"), at + ": no \"article\"");
  expect_error(read(R"({"article": "x", "questions": ["q"], "options": [["a", "b", "c", "d"]], "answers": ["E"]})"),
               at + ": question 0: the answer is \"E\"");
  expect_error(read(R"({"article": "x", "questions": ["q"], "options": [["a", "b", "c"]], "answers": ["A"]})"),
               at + ": question 0: has 3 options, not 4");
  expect_error(read(R"({"article": "x", "questions": ["q", "r"], "options": [["a", "b", "c", "d"]], "answers": ["A"]})"),
               at + ": 2 questions, 1 option lists and 1 answers");
  expect_error([&] { read_race_directory((dir_.path / "missing").string(), *tokenizer_, 16); }, "does not exist");
  fs::remove(data_ / "a.txt");
  expect_error([&] { read_race_directory(data_.string(), *tokenizer_, 16); }, "has no *.txt file");
}

}  // namespace
}  // namespace tessera::tasks
