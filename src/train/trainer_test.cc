#include "train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "ckpt/checkpoint.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_flags(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

Trainer make_trainer(const std::string& flags) { return Trainer(parse_train_arguments(split_flags(flags))); }

fs::path fresh_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("tessera_trainer_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

const std::string kSmallModel =
    "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data "
    "--tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 "
    "--log-interval 100 --eval-iters 0 --hidden-dropout 0.1 --attention-dropout 0.1 ";

// Acceptance runs of the core-engine issue: a 4-layer, 256-hidden GPT learns the mock stream in 200
// iterations, GPT-2 style and Llama style (rope + RMSNorm + SwiGLU + GQA).
void expect_learns(const std::string& extra) {
  const double vocab = 256;
  Trainer t = make_trainer(
      "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 64 --mock-data "
      "--tokenizer-type NullTokenizer --vocab-size 255 --micro-batch-size 8 --global-batch-size 8 --lr 1e-3 "
      "--min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 20 --train-iters 200 --log-interval 50 "
      "--eval-interval 200 --eval-iters 2 --hidden-dropout 0 --attention-dropout 0 " + extra);
  t.train();
  ASSERT_EQ(t.losses().size(), 200u);
  EXPECT_NEAR(t.losses().front(), std::log(vocab), 0.5);  // starts at chance
  double last10 = 0;
  for (size_t i = 190; i < 200; ++i) last10 += t.losses()[i] / 10;
  EXPECT_LT(last10, 0.25 * std::log(vocab)) << "the model did not learn the arithmetic sequences";
  EXPECT_LT(t.evaluate(), 0.25 * std::log(vocab));
}

TEST(Trainer, Gpt2StyleModelLearnsMockData) { expect_learns(""); }

TEST(Trainer, LlamaStyleModelLearnsMockData) {
  expect_learns(
      "--position-embedding-type rope --normalization RMSNorm --swiglu --group-query-attention "
      "--num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear");
}

// Resuming at iteration k reproduces the uninterrupted run's losses bit for bit (dropout on, so the
// RNG keying and the data position must carry over too).
void expect_bitwise_resume(const std::string& extra) {
  fs::path dir = fresh_dir("resume");
  Trainer full = make_trainer(kSmallModel + extra + " --train-iters 12");
  full.train();

  Trainer first = make_trainer(kSmallModel + extra + " --train-iters 6 --lr-decay-iters 12 --save " + dir.string());
  first.train();
  ASSERT_EQ(ckpt::latest_checkpointed_iteration(dir.string()), 6);
  Trainer second = make_trainer(kSmallModel + extra + " --train-iters 12 --load " + dir.string());
  EXPECT_EQ(second.iteration(), 6);
  second.train();

  ASSERT_EQ(second.losses().size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(second.losses()[i], full.losses()[6 + i]) << "iteration " << 7 + i;
  const Tensor& a = full.parameters().values();
  const Tensor& b = second.parameters().values();
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.f32()[i], b.f32()[i]) << "parameter element " << i;
  fs::remove_all(dir);
}

TEST(Trainer, ResumeReproducesTheUninterruptedRunBitForBit) { expect_bitwise_resume(""); }

TEST(Trainer, ResumeIsBitExactForLlamaStyleWithGradientAccumulation) {
  expect_bitwise_resume(
      "--position-embedding-type rope --normalization RMSNorm --swiglu --group-query-attention "
      "--num-query-groups 2 --untie-embeddings-and-output-weights --lr-warmup-iters 3 --lr-decay-style cosine");
}

TEST(Trainer, FinetuneLoadsWeightsOnlyAndStartsAtZero) {
  fs::path dir = fresh_dir("finetune");
  Trainer first = make_trainer(kSmallModel + "--train-iters 4 --save " + dir.string());
  first.train();
  Trainer tuned = make_trainer(kSmallModel + "--train-iters 4 --finetune --load " + dir.string());
  EXPECT_EQ(tuned.iteration(), 0);
  const Tensor& a = first.parameters().values();
  const Tensor& b = tuned.parameters().values();
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.f32()[i], b.f32()[i]);
  fs::remove_all(dir);
}

TEST(Trainer, LoadingIntoADifferentModelNamesTheTensorAndShapes) {
  fs::path dir = fresh_dir("mismatch");
  make_trainer(kSmallModel + "--train-iters 1 --save " + dir.string()).train();
  std::string bigger = kSmallModel;
  bigger.replace(bigger.find("--hidden-size 32"), 16, "--hidden-size 64");
  try {
    make_trainer(bigger + "--train-iters 2 --load " + dir.string());
    FAIL() << "expected a shape mismatch";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("embedding.word_embeddings.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[128, 32]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[128, 64]"), std::string::npos) << msg;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::train

namespace tessera::train {
namespace {

// A non-finite gradient skips the update and is counted; the run stops with a clear error after
// --max-nan-iterations consecutive ones, and a finite iteration in between resets the count.
TEST(Trainer, NonFiniteIterationsAreSkippedThenStopTraining) {
  {
    TrainArguments a = parse_train_arguments(split_flags(kSmallModel + "--train-iters 6 --max-nan-iterations 2"));
    a.inject_nan_at_iterations = {2, 4};  // never two in a row
    Trainer t(a);
    t.train();
    EXPECT_EQ(t.iteration(), 6);
  }
  TrainArguments a = parse_train_arguments(split_flags(kSmallModel + "--train-iters 6 --max-nan-iterations 2"));
  a.inject_nan_at_iterations = {3, 4};
  Trainer t(a);
  try {
    t.train();
    FAIL() << "training did not stop";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training stopped at iteration 4: 2 consecutive iterations with a "
                                         "non-finite loss or gradient norm (--max-nan-iterations=2)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(t.iteration(), 4);
}

// The skipped step leaves the weights as they were.
TEST(Trainer, ASkippedStepDoesNotChangeTheWeights) {
  TrainArguments a = parse_train_arguments(split_flags(kSmallModel + "--train-iters 1"));
  a.inject_nan_at_iterations = {1};
  Trainer t(a);
  Tensor before = t.parameters().values().clone();
  t.train();
  const Tensor& after = t.parameters().values();
  for (int64_t i = 0; i < after.numel(); ++i) ASSERT_EQ(after.f32()[i], before.f32()[i]) << i;
}

}  // namespace
}  // namespace tessera::train
