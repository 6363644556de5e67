// Window arithmetic, LAMBADA samples and the evaluation totals on small hand-made inputs, checked
// against values worked out by hand from Megatron's tasks/zeroshot_gpt code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "eval/zeroshot_datasets.h"
#include "eval/zeroshot_evaluation.h"

namespace tessera::eval {
namespace {

// One token per byte; eod 256.
class ByteTokenizer final : public data::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  std::string decode(std::span<const int32_t> ids) const override { return std::string(ids.begin(), ids.end()); }
  int32_t vocab_size() const override { return 257; }
  int32_t eod() const override { return 256; }
  std::string_view name() const override { return "ByteTokenizer"; }
};

std::vector<int32_t> iota(int n) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(LmWindows, OverlappingWindowsScoreEveryTargetOnce) {
  // 11 tokens, windows of 4 targets every 2 tokens: ceil((10 - 2) / 2) + 1 = 5 windows.
  LmWindows w(iota(11), 4, 99, 2);
  ASSERT_EQ(w.size(), 5);
  EXPECT_EQ(w.at(0).tokens, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(w.at(0).mask, (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(w.at(1).tokens, (std::vector<int32_t>{2, 3, 4, 5, 6}));
  EXPECT_EQ(w.at(1).mask, (std::vector<float>{0, 0, 1, 1}));
  EXPECT_EQ(w.at(3).tokens, (std::vector<int32_t>{6, 7, 8, 9, 10}));
  EXPECT_EQ(w.at(3).mask, (std::vector<float>{0, 0, 1, 1}));
  // The last window is padding past the end and scores nothing (as Megatron's).
  EXPECT_EQ(w.at(4).tokens, (std::vector<int32_t>{8, 9, 10, 99, 99}));
  EXPECT_EQ(w.at(4).mask, (std::vector<float>{0, 0, 0, 0}));
  // Each target 1..10 is scored exactly once.
  std::vector<int> scored(11, 0);
  for (int64_t i = 0; i < w.size(); ++i) {
    EvalSample s = w.at(i);
    for (int t = 0; t < 4; ++t)
      if (s.mask[t] != 0) scored[s.tokens[t + 1]]++;
  }
  EXPECT_EQ(scored, (std::vector<int>{0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
}

TEST(LmWindows, WithoutOverlap) {
  LmWindows w(iota(11), 4, 99, 0);  // 0: the window length
  ASSERT_EQ(w.size(), 3);            // ceil((10 - 4) / 4) + 1
  EXPECT_EQ(w.at(1).tokens, (std::vector<int32_t>{4, 5, 6, 7, 8}));
  EXPECT_EQ(w.at(1).mask, (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(w.at(2).tokens, (std::vector<int32_t>{8, 9, 10, 99, 99}));
  EXPECT_EQ(w.at(2).mask, (std::vector<float>{1, 1, 0, 0}));
  EXPECT_THROW(LmWindows(iota(11), 4, 99, 5), Error);  // overlap longer than the window
}

TEST(Wikitext, OriginalTokenCountIsPythonsStripSplit) {
  EXPECT_EQ(count_original_tokens(" a b \n c \n"), 4);  // ["a", "b", "\n", "c"]
  EXPECT_EQ(count_original_tokens("a  b"), 3);         // ["a", "", "b"]
  EXPECT_EQ(count_original_tokens(" \n"), 1);          // [""]
}

TEST(Lambada, StrictAndNonStrictExamples) {
  ByteTokenizer tok;
  LambadaExample loose = lambada_example("ab cd", tok, false);
  EXPECT_EQ(loose.context, (std::vector<int32_t>{'a', 'b', ' ', 'c'}));
  EXPECT_EQ(loose.label, (std::vector<int32_t>{'d'}));
  LambadaExample strict = lambada_example("ab cd\n", tok, true);
  EXPECT_EQ(strict.context, (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(strict.label, (std::vector<int32_t>{' ', 'c', 'd'}));
  EvalSample s = lambada_sample(strict, 8, 256);
  EXPECT_EQ(s.tokens, (std::vector<int32_t>{'a', 'b', ' ', 'c', 'd', 256, 256, 256, 256}));
  EXPECT_EQ(s.mask, (std::vector<float>{0, 1, 1, 1, 0, 0, 0, 0}));
  EvalSample cut = lambada_sample(strict, 3, 256);  // too long: the beginning goes
  EXPECT_EQ(cut.tokens, (std::vector<int32_t>{'b', ' ', 'c', 'd'}));
  EXPECT_EQ(cut.mask, (std::vector<float>{1, 1, 1}));
}

// Scores every label -1 nat, and predicts every label except the byte 'x'.
class FixedRunner final : public infer::ModelRunner {
 public:
  FixedRunner() {
    config_.vocab_size = 257;
    config_.padded_vocab_size = 264;
    config_.seq_length = 4;
  }
  const model::ModelConfig& config() const override { return config_; }
  model::KvPool make_kv_pool(int64_t, int64_t) const override { return {}; }
  Tensor decode_step(const std::vector<model::DecodeStep>&, model::KvPool&) const override { return {}; }
  void agree(std::vector<int32_t>&) const override {}
  infer::Scores score(const model::MicroBatch& b) const override {
    infer::Scores s;
    for (int64_t i = 0; i < b.labels.numel(); ++i) {
      s.label_logprob.push_back(-1.0);
      int32_t label = b.labels.i32()[i];
      s.argmax.push_back(label == 'x' ? 0 : label);
    }
    return s;
  }

 private:
  model::ModelConfig config_;
};

std::string write(const std::string& name, const std::string& text) {
  std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(ZeroShot, WikitextTotalsAndMegatronsLine) {
  // 5 original words; detokenized "a-b, c" is 6 byte tokens: 5 targets in windows of 4, each -1 nat.
  std::string path = write("tessera_zeroshot_wiki.tokens", "a @-@ b , c");
  ByteTokenizer tok;
  FixedRunner runner;
  auto world = comm::make_single_process_group("world");
  ZeroShotOptions o;
  o.task = "WIKITEXT103";
  o.valid_data = path;
  o.overlapping_eval = 0;
  o.micro_batch_size = 1;
  ZeroShotResult r = evaluate_zeroshot(o, runner, tok, *world);
  EXPECT_EQ(r.num_original_tokens, 5);
  EXPECT_EQ(r.num_tokenized_tokens, 6);
  EXPECT_EQ(r.num_examples, 2);
  EXPECT_DOUBLE_EQ(r.total, 5.0);
  EXPECT_DOUBLE_EQ(r.avg_loss, 1.0);
  EXPECT_DOUBLE_EQ(r.ppl, std::exp(1.0));
  EXPECT_DOUBLE_EQ(r.token_ratio, 1.25);
  EXPECT_DOUBLE_EQ(r.adjusted_ppl, std::exp(1.25));
  EXPECT_EQ(format_result(r), " validation results on WIKITEXT103 | avg loss: 1.0000E+00 | ppl: 2.7183E+00 | "
                              "adjusted ppl: 3.4903E+00 | token ratio: 1.25 |");
  std::filesystem::remove(path);
}

TEST(ZeroShot, LambadaAccuracyStrictAndNot) {
  std::string path = write("tessera_zeroshot_lambada.jsonl",
                           "{\"text\": \"ab cd\"}\n{\"text\": \"ab cx\"}\n{\"text\": \"ab xd\"}\n");
  ByteTokenizer tok;
  FixedRunner runner;
  auto world = comm::make_single_process_group("world");
  ZeroShotOptions o;
  o.task = "LAMBADA";
  o.valid_data = path;
  o.micro_batch_size = 2;
  o.seq_length = 8;
  o.strict_lambada = true;
  ZeroShotResult strict = evaluate_zeroshot(o, runner, tok, *world);
  EXPECT_EQ(strict.num_examples, 3);
  EXPECT_DOUBLE_EQ(strict.total, 1.0);  // only "cd": " cx" and " xd" each miss a token
  o.strict_lambada = false;
  ZeroShotResult loose = evaluate_zeroshot(o, runner, tok, *world);
  EXPECT_DOUBLE_EQ(loose.total, 2.0);  // "d", "d" right; "x" wrong
  EXPECT_EQ(format_result(loose), " validation results on LAMBADA | number correct: 2.0000E+00 | total examples: "
                                  "3.0000E+00 | avg accuracy: 6.6667E-01");
  std::filesystem::remove(path);
}

// The real WikiText-103 files (data/eval, in the repository): Megatron's "number of original tokens"
// recorded in data/eval/README.md.
TEST(Wikitext, OriginalTokenCountsOfTheRealFiles) {
  const std::filesystem::path dir = std::filesystem::path(__FILE__).parent_path() / "../../data/eval";
  for (auto [name, words] : {std::pair{"wiki.test.tokens", 245566}, std::pair{"wiki.valid.tokens", 217642}}) {
    std::ifstream in(dir / name, std::ios::binary);
    ASSERT_TRUE(in) << "cannot open " << (dir / name) << " (the evaluation data, stored in the repository)";
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(count_original_tokens(text), words) << name;
  }
}

}  // namespace
}  // namespace tessera::eval
