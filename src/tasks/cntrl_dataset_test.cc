// MEGATRON-CNTRL's fine-tuning data: the prompt formats, the reading of `cntrl preprocess` files (and
// their errors), the ranker's sequences and training questions, on hand-written files and a small
// WordPiece vocabulary.
#include "tasks/cntrl_dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/check.h"
#include "data/bert_wordpiece_tokenizer.h"

namespace tessera::tasks {
namespace {

namespace fs = std::filesystem;
using Strings = std::vector<std::string>;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "cntrl_XXXXXX").string();
    TESSERA_CHECK(mkdtemp(templ.data()) != nullptr, "mkdtemp failed");
    path = templ;
  }
  ~TempDir() { fs::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error, expected one containing: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(CntrlFormats, PromptsAndTargets) {
  EXPECT_EQ(cntrl_keyword_prompt("Tom was hungry."), "Tom was hungry. Keywords:");
  EXPECT_EQ(cntrl_keyword_target({"bakery", "fresh bread"}), " bakery, fresh bread");
  EXPECT_EQ(cntrl_keyword_target({}), "");
  EXPECT_EQ(cntrl_generator_prompt("Tom was hungry.", {"bread is at bakery", "dog desires bread"}),
            "Knowledge: bread is at bakery. dog desires bread. Story: Tom was hungry.");
  EXPECT_EQ(cntrl_generator_prompt("Tom was hungry.", {}), "Knowledge: Story: Tom was hungry.");
  // Parsing what the predictor generated: commas split, case and spaces and repeats do not count.
  EXPECT_EQ(parse_cntrl_keywords(" Bakery, fresh bread ,, bakery,"), (Strings{"bakery", "fresh bread"}));
  EXPECT_EQ(parse_cntrl_keywords(cntrl_keyword_target({"went", "market"})), (Strings{"went", "market"}));
  EXPECT_TRUE(parse_cntrl_keywords("  ").empty());
}

TEST(CntrlFormats, ReadsThePairsOfPreprocessAndNamesBadLines) {
  TempDir dir;
  const std::string keywords = dir.write(
      "k.jsonl", "{\"context\": \"Tom was hungry.\", \"keywords\": [\"went\", \"bakery\"]}\n\n"
                 "{\"context\": \"A. B.\", \"keywords\": []}\n");
  const std::vector<PromptTarget> k = read_cntrl_pairs(keywords, "keywords");
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].prompt, "Tom was hungry. Keywords:");
  EXPECT_EQ(k[0].target, " went, bakery");
  EXPECT_EQ(k[1].target, "");
  const std::string generator = dir.write(
      "g.jsonl", "{\"context\": \"Tom was hungry.\", \"knowledge_topN\": [\"bread is at bakery\"], "
                 "\"target\": \"He went to the bakery.\"}\n");
  const std::vector<PromptTarget> g = read_cntrl_pairs(generator, "generator");
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].prompt, "Knowledge: bread is at bakery. Story: Tom was hungry.");
  EXPECT_EQ(g[0].target, " He went to the bakery.");

  expect_error([&] { read_cntrl_pairs(keywords, "generator"); }, "k.jsonl:1: no \"knowledge_topN\"");
  expect_error([&] { read_cntrl_pairs(dir.write("b.jsonl", "{\"context\": 1}\n"), "keywords"); },
               "b.jsonl:1: \"context\" is not a string");
  expect_error([&] { read_cntrl_pairs(dir.write("c.jsonl", "{\"context\": \"x\", \"keywords\": [1]}\n"), "keywords"); },
               "c.jsonl:1: \"keywords\" holds a number, not a string");
  expect_error([&] { read_cntrl_pairs(dir.write("d.jsonl", "[1, 2]\n"), "keywords"); }, "d.jsonl:1: not a JSON object");
  expect_error([&] { read_cntrl_pairs(dir.write("e.jsonl", "\n"), "keywords"); }, "e.jsonl: no examples");
  expect_error([&] { read_cntrl_pairs((dir.path / "none.jsonl").string(), "keywords"); }, "cannot open the file");
}

class CntrlRanker : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
    for (const char* w : {"tom", "was", "hungry", "bread", "is", "at", "bakery", "dog", "desires", "car", "has",
                          "engine", "used", "for", "driving", "he", "went", "."})
      vocab += std::string(w) + "\n";
    tokenizer_ = std::make_unique<data::BertWordPieceTokenizer>(dir_.write("vocab.txt", vocab), true);
  }
  int32_t id(const std::string& w) const { return tokenizer_->encode(w).at(0); }
  TempDir dir_;
  std::unique_ptr<data::BertWordPieceTokenizer> tokenizer_;
};

TEST_F(CntrlRanker, SequenceIsKnowledgeThenTheEndOfTheContext) {
  const TokensTypesPaddings s = cntrl_ranker_sequence("bread is at bakery", "tom was hungry .", *tokenizer_, 12);
  const std::vector<int32_t> expected{2, id("bread"), id("is"), id("at"), id("bakery"), 3,
                                      id("tom"), id("was"), id("hungry"), id("."), 3, 0};
  EXPECT_EQ(s.ids, expected);
  EXPECT_EQ(s.types, (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0}));
  EXPECT_EQ(s.paddings, (std::vector<int32_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}));
  // Too long: of the 9 ids of room the knowledge keeps half (4), the context its last 5.
  const TokensTypesPaddings cut =
      cntrl_ranker_sequence("bread is at bakery dog desires bread", "tom was hungry . he went", *tokenizer_, 12);
  EXPECT_EQ(cut.ids, (std::vector<int32_t>{2, id("bread"), id("is"), id("at"), id("bakery"), 3, id("was"), id("hungry"),
                                           id("."), id("he"), id("went"), 3}));
  EXPECT_EQ(cut.paddings, std::vector<int32_t>(12, 1));
}

TEST_F(CntrlRanker, QuestionsHoldThePositiveAmongDistinctNegatives) {
  const std::string file = dir_.write(
      "r.jsonl",
      "{\"context\": \"tom was hungry .\", \"knowledge\": [\"bread is at bakery\", \"dog desires bread\", "
      "\"car has engine\"], \"pseudo_labels\": [0, 1, 0]}\n"
      "{\"context\": \"he went\", \"knowledge\": [], \"pseudo_labels\": []}\n"  // nothing: no question
      "{\"context\": \"he went\", \"knowledge\": [\"car is used for driving\"], \"pseudo_labels\": [1]}\n"
      "{\"context\": \"he went\", \"knowledge\": [\"car has engine\"], \"pseudo_labels\": [0]}\n");  // no positive
  const std::vector<MultipleChoiceSample> q = read_cntrl_ranker_questions(file, *tokenizer_, 16, 3, 7);
  ASSERT_EQ(q.size(), 2u);
  auto text = [&](const TokensTypesPaddings& s) {
    std::vector<int32_t> knowledge;
    for (size_t i = 1; s.ids[i] != 3; ++i) knowledge.push_back(s.ids[i]);
    return tokenizer_->decode(knowledge);
  };
  // The first: its positive and its two negatives, each once.
  ASSERT_EQ(q[0].choices.size(), 3u);
  EXPECT_EQ(text(q[0].choices[static_cast<size_t>(q[0].label)]), "dog desires bread");
  std::set<std::string> first;
  for (const auto& c : q[0].choices) first.insert(text(c));
  EXPECT_EQ(first, (std::set<std::string>{"bread is at bakery", "dog desires bread", "car has engine"}));
  // The second has no negatives of its own: two other sentences of the file, neither its positive.
  EXPECT_EQ(text(q[1].choices[static_cast<size_t>(q[1].label)]), "car is used for driving");
  std::set<std::string> second;
  for (const auto& c : q[1].choices) second.insert(text(c));
  EXPECT_EQ(second.size(), 3u);
  // The same seed draws the same questions; the positive is not always at one place.
  const std::vector<MultipleChoiceSample> again = read_cntrl_ranker_questions(file, *tokenizer_, 16, 3, 7);
  EXPECT_EQ(again[0].label, q[0].label);
  EXPECT_EQ(again[1].choices[0].ids, q[1].choices[0].ids);
  std::set<int32_t> places;
  for (uint64_t seed = 0; seed < 20; ++seed) places.insert(read_cntrl_ranker_questions(file, *tokenizer_, 16, 3, seed)[0].label);
  EXPECT_EQ(places.size(), 3u);

  expect_error([&] { read_cntrl_ranker_questions(file, *tokenizer_, 16, 9, 7); }, "too few distinct knowledge sentences");
  expect_error([&] {
    read_cntrl_ranker_questions(dir_.write("bad.jsonl", "{\"context\": \"x\", \"knowledge\": [\"a\"], \"pseudo_labels\": [2]}\n"),
                                *tokenizer_, 16, 2, 7);
  }, "bad.jsonl:1: a pseudo-label is 2");
  expect_error([&] {
    read_cntrl_ranker_questions(dir_.write("n.jsonl", "{\"context\": \"x\", \"knowledge\": [\"a\", \"b\"], \"pseudo_labels\": [1]}\n"),
                                *tokenizer_, 16, 2, 7);
  }, "n.jsonl:1: \"pseudo_labels\" must be a list of one 0 or 1 per knowledge sentence");
  expect_error([&] {
    read_cntrl_ranker_questions(dir_.write("z.jsonl", "{\"context\": \"x\", \"knowledge\": [\"a\"], \"pseudo_labels\": [0]}\n"),
                                *tokenizer_, 16, 2, 7);
  }, "no line has a pseudo-positive");
}

}  // namespace
}  // namespace tessera::tasks
