#include "ckpt/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ckpt/safetensors.h"

namespace tessera::ckpt {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("tessera_ckpt_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

struct Fixture {
  model::ParameterSet params;
  std::unique_ptr<optim::AdamWOptimizer> optimizer;
  explicit Fixture(uint64_t seed) {
    params.add({"a.weight", {4, 3}, model::Init::Normal, 1.0f, true});
    params.add({"a.bias", {4}, model::Init::Normal, 1.0f, false});
    params.allocate(seed);
    optimizer = std::make_unique<optim::AdamWOptimizer>(params, optim::AdamWConfig{});
    params.grads().fill_(0.5f);
    optimizer->step(0.1f);
  }
};

void expect_equal(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.numel(), b.numel());
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.f32()[i], b.f32()[i]) << "element " << i;
}

TEST(Checkpoint, RoundTripsModelOptimizerAndState) {
  fs::path dir = fresh_dir("roundtrip");
  Fixture saved(1), loaded(2);
  TrainingState state{7, 56, 1, 99, {{"hidden_size", 3}}};
  save_checkpoint(dir.string(), state, saved.params, saved.optimizer.get());
  EXPECT_EQ(latest_checkpointed_iteration(dir.string()), 7);
  EXPECT_TRUE(fs::exists(dir / "iter_0000007" / "index.json"));
  EXPECT_FALSE(fs::exists(dir / "iter_0000007.tmp"));

  TrainingState got = load_checkpoint(dir.string(), loaded.params, loaded.optimizer.get());
  EXPECT_EQ(got.iteration, 7);
  EXPECT_EQ(got.consumed_train_samples, 56);
  EXPECT_EQ(got.skipped_iterations, 1);
  EXPECT_EQ(got.seed, 99u);
  EXPECT_EQ(got.args["hidden_size"], 3);
  expect_equal(loaded.params.values(), saved.params.values());
  expect_equal(loaded.optimizer->exp_avg(), saved.optimizer->exp_avg());
  expect_equal(loaded.optimizer->exp_avg_sq(), saved.optimizer->exp_avg_sq());
  EXPECT_EQ(loaded.optimizer->steps(), saved.optimizer->steps());

  // The model file is plain safetensors under the parameters' own names.
  SafetensorsFile f = SafetensorsFile::open((dir / "iter_0000007" / "model.tp00.pp00.safetensors").string());
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a.bias", "a.weight"}));
  fs::remove_all(dir);
}

TEST(Checkpoint, AnInterruptedSaveLeavesThePreviousCheckpointUsable) {
  fs::path dir = fresh_dir("interrupted");
  Fixture saved(1);
  save_checkpoint(dir.string(), TrainingState{5, 10, 0, 1, {}}, saved.params, saved.optimizer.get());
  // A save of iteration 6 that died half way: its temporary directory is there, the tracker is not updated.
  fs::create_directories(dir / "iter_0000006.tmp");
  std::ofstream(dir / "iter_0000006.tmp" / "model.tp00.pp00.safetensors") << "partial";
  Fixture loaded(2);
  EXPECT_EQ(load_checkpoint(dir.string(), loaded.params, loaded.optimizer.get()).iteration, 5);
  expect_equal(loaded.params.values(), saved.params.values());
  // Saving the same iteration again replaces it cleanly.
  saved.params.values().fill_(3.0f);
  save_checkpoint(dir.string(), TrainingState{5, 10, 0, 1, {}}, saved.params, saved.optimizer.get());
  load_checkpoint(dir.string(), loaded.params, nullptr);
  EXPECT_EQ(loaded.params.values().f32()[0], 3.0f);
  fs::remove_all(dir);
}

TEST(Checkpoint, ProblemsNameTheFileAndTheTensor) {
  fs::path dir = fresh_dir("problems");
  Fixture saved(1);
  auto expect_error = [&](model::ParameterSet& params, optim::AdamWOptimizer* opt, const std::string& needle) {
    try {
      load_checkpoint(dir.string(), params, opt);
      ADD_FAILURE() << "expected an error containing " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(saved.params, nullptr, "latest_checkpointed_iteration.txt is missing");

  save_checkpoint(dir.string(), TrainingState{3, 0, 0, 1, {}}, saved.params, nullptr);
  expect_error(saved.params, saved.optimizer.get(), "holds no optimizer state");

  model::ParameterSet other;
  other.add({"a.weight", {4, 3}, model::Init::Zeros, 0, true});
  other.add({"b.weight", {2}, model::Init::Zeros, 0, true});
  other.allocate(0);
  expect_error(other, nullptr, "has no tensor b.weight");

  fs::path model_file = dir / "iter_0000003" / "model.tp00.pp00.safetensors";
  fs::resize_file(model_file, fs::file_size(model_file) - 4);
  expect_error(saved.params, nullptr, model_file.string());

  std::ofstream(dir / "iter_0000003" / "index.json") << "{ not json";
  expect_error(saved.params, nullptr, "index.json is not valid JSON");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::ckpt
