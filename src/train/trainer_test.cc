#include "train/trainer.h"
#include "train/trainer_testing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "ckpt/checkpoint.h"
#include "kernels/gemm.h"
#include "kernels/precision.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;

using testing::split_flags;

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
  EXPECT_LT(t.evaluate().lm_loss, 0.25 * std::log(vocab));
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
  EXPECT_EQ(second.loss_scale(), full.loss_scale());
  fs::remove_all(dir);
}

// Ouroboros in one process (issue 38): with every iteration synchronous it is plain training bit for bit
// (clipping off: the emulation's norm is summed per module); with delays it trains a different sequence.
TEST(Trainer, OuroborosWithEveryIterationSynchronousIsPlainTraining) {
  const std::string run = kSmallModel + "--train-iters 3 --clip-grad 0 ";
  Trainer plain = make_trainer(run);
  plain.train();
  Trainer sync = make_trainer(run + "--pipeline-schedule ouroboros --ouroboros-modules 2 --ouroboros-warmup-iters 3");
  sync.train();
  ASSERT_EQ(sync.losses().size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(sync.losses()[i], plain.losses()[i]) << "iteration " << i + 1;
  // The driver's weights are the trainer's (what evaluation and checkpoints read).
  const Tensor& a = plain.parameters().values();
  const Tensor& b = sync.parameters().values();
  ASSERT_EQ(a.numel(), b.numel());
  EXPECT_EQ(std::memcmp(a.f32(), b.f32(), a.numel() * sizeof(float)), 0);
  Trainer delayed = make_trainer(run + "--pipeline-schedule ouroboros --ouroboros-modules 2 --ouroboros-warmup-iters 1");
  ::testing::internal::CaptureStdout();
  delayed.train();
  const std::string log = ::testing::internal::GetCapturedStdout();
  // The log's memory report shows the copies the delay keeps: module 0 (delay 1) its last weights.
  EXPECT_NE(log.find("ouroboros delays keep (rank 0): module 0: 1 earlier weight versions ("), std::string::npos) << log;
  EXPECT_NE(log.find("module 1: 0 earlier weight versions (0"), std::string::npos) << log;
  EXPECT_EQ(delayed.losses()[1], plain.losses()[1]);  // iteration 2 runs forward at the synchronous weights
  EXPECT_NE(delayed.losses()[2], plain.losses()[2]);
  EXPECT_TRUE(std::isfinite(delayed.losses()[2]));
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
  // The flags against the configuration the checkpoint records: refused before any tensor is read.
  try {
    make_trainer(bigger + "--train-iters 2 --load " + dir.string());
    FAIL() << "expected the model flags to be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--hidden-size=64 (the checkpoint's: 32)"), std::string::npos) << e.what();
  }
  // A configuration that lies about the weights (an edited index) passes that check; the loader then
  // names the tensor and both shapes.
  const fs::path index = dir / "iter_0000001" / "index.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(index));
  j["args"]["model"]["hidden_size"] = 64;
  j["args"]["model"]["ffn_hidden_size"] = 256;
  j["args"]["model"]["kv_channels"] = 16;
  std::ofstream(index) << j.dump();
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
    TrainArguments a = parse_train_arguments(
        split_flags(kSmallModel + "--train-iters 6 --max-nan-iterations 2 --no-check-for-nan-in-loss-and-grad"));
    a.inject_nan_at_iterations = {2, 4};  // never two in a row
    Trainer t(a);
    t.train();
    EXPECT_EQ(t.iteration(), 6);
  }
  TrainArguments a = parse_train_arguments(
      split_flags(kSmallModel + "--train-iters 6 --max-nan-iterations 2 --no-check-for-nan-in-loss-and-grad"));
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

// The learning rates a run logged to DIR/metrics.jsonl, iteration by iteration.
std::vector<double> logged_learning_rates(const fs::path& dir) {
  std::vector<double> rates;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("learning_rate")) rates.push_back(j["learning_rate"].get<double>());
  }
  return rates;
}

// --log-params-norm: the L2 norm of the parameters after the logged iteration's step, in the log line and
// metrics.jsonl (in one process: every value of the flat buffer once).
TEST(Trainer, LogsTheParametersNorm) {
  const fs::path dir = fs::temp_directory_path() / "tessera_trainer_params_norm";
  fs::remove_all(dir);
  Trainer t(parse_train_arguments(
      split_flags(kSmallModel + "--train-iters 2 --log-interval 1 --log-params-norm --log-dir " + dir.string())));
  t.train();
  double squares = 0;
  const Tensor& values = t.parameters().values();
  for (int64_t i = 0; i < values.numel(); ++i) squares += static_cast<double>(values.f32()[i]) * values.f32()[i];
  std::ifstream in(dir / "metrics.jsonl");
  std::vector<double> norms;
  for (std::string line; std::getline(in, line);)
    if (const nlohmann::json j = nlohmann::json::parse(line); j.contains("params_norm")) norms.push_back(j["params_norm"]);
  ASSERT_EQ(norms.size(), 2u);
  EXPECT_NEAR(norms[1], std::sqrt(squares), 1e-6 * std::sqrt(squares));
  EXPECT_NE(norms[0], norms[1]);  // the step changed the weights
  fs::remove_all(dir);
}

// --train-samples: the schedule counts the samples of the updates made, as Megatron's scheduler steps
// only then; a skipped iteration's samples (a ramp's batch of 2 here) stay out, after a resume too.
TEST(Trainer, ASampleScheduleLeavesOutTheSamplesOfSkippedIterations) {
  const fs::path dir = fs::temp_directory_path() / "tessera_trainer_sample_schedule";
  fs::remove_all(dir);
  const std::string flags = kSmallModel +
                            "--micro-batch-size 1 --global-batch-size 8 --train-samples 30 --rampup-batch-size 2 2 12 "
                            "--lr-warmup-samples 8 --lr-decay-style constant --log-interval 1 "
                            "--no-check-for-nan-in-loss-and-grad --save " +
                            (dir / "ckpt").string();
  TrainArguments a = parse_train_arguments(split_flags(flags + " --log-dir " + (dir / "whole").string()));
  a.inject_nan_at_iterations = {2};
  Trainer whole(a);
  whole.train();
  // Samples before each iteration: 0, 2, 4, 8, 14, 22; the schedule's (iteration 2 skipped): 0, 2, 2, 6, 12, 20.
  const std::vector<double> rates = logged_learning_rates(dir / "whole");
  const std::vector<double> expected = {0, 3e-3 * 2 / 8, 3e-3 * 2 / 8, 3e-3 * 6 / 8, 3e-3, 3e-3};
  ASSERT_EQ(rates.size(), expected.size());
  for (size_t i = 0; i < rates.size(); ++i) EXPECT_NEAR(rates[i], expected[i], 1e-9) << "iteration " << i + 1;

  // Stopped after iteration 3 and resumed: the checkpoint carries the skipped samples.
  fs::remove_all(dir / "ckpt");
  TrainArguments first = parse_train_arguments(split_flags(flags + " --exit-interval 3"));
  first.inject_nan_at_iterations = {2};
  Trainer(first).train();
  Trainer resumed(parse_train_arguments(split_flags(flags + " --load " + (dir / "ckpt").string() + " --log-dir " +
                                                    (dir / "resumed").string())));
  resumed.train();
  EXPECT_EQ(logged_learning_rates(dir / "resumed"), std::vector<double>(rates.begin() + 3, rates.end()));
  fs::remove_all(dir);
}

// With Megatron's default checks (--check-for-nan-in-loss-and-grad, --rerun-mode validate_results) a NaN
// gradient re-runs the step and, reproduced, stops with exit code 16 before the update (issue 58).
TEST(Trainer, AReproducedNanGradientStopsWithExitCode16BeforeTheUpdate) {
  TrainArguments a = parse_train_arguments(split_flags(kSmallModel + "--train-iters 3"));
  a.inject_nan_at_iterations = {2};
  Trainer t(a);
  try {
    t.train();
    FAIL() << "training did not stop";
  } catch (const RerunExit& e) {
    EXPECT_EQ(e.code(), 16);
    EXPECT_NE(std::string(e.what()).find("iteration 2, rank 0: found NaN in local grad norm"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(t.iteration(), 1);
  EXPECT_EQ(t.losses().size(), 1u);
}

// The skipped step leaves the weights as they were.
TEST(Trainer, ASkippedStepDoesNotChangeTheWeights) {
  TrainArguments a =
      parse_train_arguments(split_flags(kSmallModel + "--train-iters 1 --no-check-for-nan-in-loss-and-grad"));
  a.inject_nan_at_iterations = {1};
  Trainer t(a);
  Tensor before = t.parameters().values().clone();
  t.train();
  const Tensor& after = t.parameters().values();
  for (int64_t i = 0; i < after.numel(); ++i) ASSERT_EQ(after.f32()[i], before.f32()[i]) << i;
}

}  // namespace
}  // namespace tessera::train

namespace tessera::train {
namespace {

// Mixed precision (issue 6): 200 iterations in bf16 and in fp16 track the fp32 loss curve; the last ten
// iterations' mean loss is within 2% of fp32's, and the curves differ (the rounding did happen).
TEST(Trainer, Bf16AndFp16RunsTrackTheFp32LossCurve) {
  const std::string run =
      "--num-layers 4 --hidden-size 128 --num-attention-heads 8 --seq-length 64 --mock-data "
      "--tokenizer-type NullTokenizer --vocab-size 255 --micro-batch-size 8 --global-batch-size 8 --lr 1e-3 "
      "--min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 20 --train-iters 200 --log-interval 50 "
      "--eval-iters 0 --hidden-dropout 0 --attention-dropout 0 ";
  auto last10 = [](const Trainer& t) {
    double sum = 0;
    for (size_t i = t.losses().size() - 10; i < t.losses().size(); ++i) sum += t.losses()[i] / 10;
    return sum;
  };
  Trainer fp32 = make_trainer(run);
  fp32.train();
  for (const char* precision : {"--bf16", "--fp16 --initial-loss-scale 65536"}) {
    Trainer mixed = make_trainer(run + precision);
    mixed.train();
    ASSERT_EQ(mixed.losses().size(), 200u) << precision;
    EXPECT_NE(mixed.losses()[0], fp32.losses()[0]) << precision << ": the GEMM inputs were not rounded";
    EXPECT_NEAR(last10(mixed), last10(fp32), 0.02 * last10(fp32)) << precision;
    EXPECT_LT(last10(mixed), 0.5 * std::log(256.0)) << precision << " did not learn";
  }
}

// fp16 from Megatron's default scale of 2^32: the scaled gradients overflow, those steps are skipped
// and the scale halves until they fit; none of it counts as a NaN iteration, and training goes on.
TEST(Trainer, Fp16BacksOffTheLossScaleUntilTheGradientsFit) {
  Trainer t = make_trainer(kSmallModel + "--train-iters 40 --fp16 --hysteresis 1 --max-nan-iterations 1");
  t.train();
  EXPECT_EQ(t.iteration(), 40);
  EXPECT_GT(t.skipped_iterations(), 0);
  EXPECT_LT(t.skipped_iterations(), 30);
  // Each skip halved the scale, and nothing else changed it (the window is 1000 steps).
  EXPECT_EQ(t.loss_scale(), std::ldexp(1.0f, 32 - static_cast<int>(t.skipped_iterations())));
  EXPECT_LT(t.losses().back(), t.losses().front());
}

// An injected overflow (non-finite gradients) at a scale that fits: the step is skipped with the weights
// untouched, the scale halves after --hysteresis overflows, and the run continues.
TEST(Trainer, Fp16RecoversFromAnInjectedOverflow) {
  TrainArguments a = parse_train_arguments(
      split_flags(kSmallModel + "--train-iters 6 --fp16 --initial-loss-scale 1024 --hysteresis 2 "
                                "--max-nan-iterations 1"));
  a.inject_nan_at_iterations = {3, 5};
  Trainer t(a);
  t.train();
  EXPECT_EQ(t.iteration(), 6);
  EXPECT_EQ(t.skipped_iterations(), 2);
  EXPECT_EQ(t.loss_scale(), 512.0f);  // two overflows, hysteresis 2: one halving

  // The same run stopped after the first overflow has the weights of iteration 2.
  TrainArguments b = a;
  b.train_iters = 3;
  Trainer until_overflow(b);
  until_overflow.train();
  TrainArguments c = a;
  c.train_iters = 2;
  Trainer before_overflow(c);
  before_overflow.train();
  const Tensor& x = until_overflow.parameters().values();
  const Tensor& y = before_overflow.parameters().values();
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(x.f32()[i], y.f32()[i]) << i;
}

// The loss scaler's state is part of the checkpoint: an fp16 run resumed mid-way is bit-exact and ends
// with the uninterrupted run's scale (which grew every 4 steps: 4096 would show a lost state).
TEST(Trainer, Fp16ResumeRestoresTheLossScale) {
  expect_bitwise_resume("--fp16 --initial-loss-scale 4096 --loss-scale-window 4 --hysteresis 1");
  Trainer t = make_trainer(kSmallModel + "--train-iters 12 --fp16 --initial-loss-scale 4096 --loss-scale-window 4");
  t.train();
  EXPECT_EQ(t.loss_scale(), 4096.0f * 8);
}

TEST(Trainer, Bf16ResumeIsBitExact) { expect_bitwise_resume("--bf16"); }

// Mixed precision on the fp32 kernels reuses rounded GEMM inputs (weights rounded once per step,
// activations by their producers): bitwise the losses and weights of rounding both inputs in every
// GEMM, over steps of two micro-batches with dropout, evaluations between them, and recomputation.
TEST(Trainer, ReusedRoundedInputsGiveBitwiseTheRunOfRoundingInEveryGemm) {
  for (const char* precision : {"--bf16", "--fp16 --initial-loss-scale 4096",
                                "--bf16 --recompute-granularity full --recompute-method uniform"}) {
    auto run = [&](bool reuse) {
      kernels::set_reuse_rounded_inputs(reuse);
      Trainer t = make_trainer(kSmallModel + "--train-iters 5 --eval-interval 2 --eval-iters 1 " + precision);
      t.train();
      kernels::set_reuse_rounded_inputs(true);
      const model::ParameterSet& p = t.parameters();
      const DType type = std::string(precision).rfind("--bf16", 0) == 0 ? DType::BF16 : DType::F16;
      const bool native = kernels::GemmBackend::for_device(Device::cpu()).native_16bit(type);
      if (reuse && !native) {
        EXPECT_EQ(p.rounded_weight_bytes(), p.gemm_weight_bytes()) << precision;
      }
      if (!reuse) {
        EXPECT_EQ(p.rounded_weight_bytes(), 0) << precision;
      }
      return std::make_pair(t.losses(), std::vector<float>(p.values().f32(), p.values().f32() + p.numel()));
    };
    const auto every_gemm = run(false);
    const auto reused = run(true);
    ASSERT_EQ(reused.first.size(), 5u);
    EXPECT_EQ(reused.first, every_gemm.first) << precision;
    EXPECT_EQ(reused.second, every_gemm.second) << precision;
  }
}

// The training sampler decodes with the trained model, whose GEMMs read the rounded weight copies:
// they must follow the step before it, as with rounding in every GEMM (greedy samples equal).
TEST(Trainer, Bf16SamplesDuringTrainingUseTheUpdatedWeights) {
  auto samples = [](bool reuse) {
    kernels::set_reuse_rounded_inputs(reuse);
    Trainer t = make_trainer(kSmallModel + "--train-iters 6 --sample-interval 2 --sample-prompt 3 --bf16");
    ::testing::internal::CaptureStdout();
    t.train();
    const std::string out = ::testing::internal::GetCapturedStdout();
    kernels::set_reuse_rounded_inputs(true);
    std::string lines;
    for (size_t at = out.find(" sample at iteration"); at != std::string::npos; at = out.find(" sample at iteration", at + 1))
      lines += out.substr(at, out.find('\n', at) - at) + "\n";
    return lines;
  };
  const std::string every_gemm = samples(false);
  EXPECT_NE(every_gemm.find("sample at iteration 6"), std::string::npos) << every_gemm;
  EXPECT_EQ(samples(true), every_gemm);
}

}  // namespace
}  // namespace tessera::train
