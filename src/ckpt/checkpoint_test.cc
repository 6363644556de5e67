#include "ckpt/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>

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
  state.skipped_train_samples = 6;  // a skipped iteration of a ramp's batch of 6
  save_checkpoint(dir.string(), state, saved.params, saved.optimizer.get());
  EXPECT_EQ(latest_checkpointed_iteration(dir.string()), 7);
  EXPECT_TRUE(fs::exists(dir / "iter_0000007" / "index.json"));
  EXPECT_FALSE(fs::exists(dir / "iter_0000007.tmp"));

  TrainingState got = load_checkpoint(dir.string(), loaded.params, loaded.optimizer.get());
  EXPECT_EQ(got.iteration, 7);
  EXPECT_EQ(got.consumed_train_samples, 56);
  EXPECT_EQ(got.skipped_iterations, 1);
  EXPECT_EQ(got.skipped_train_samples, 6);
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

namespace tessera::ckpt {
namespace {

void expect_error_containing(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, CorruptionIsDetectedAndNamesTheFileAndTheTensor) {
  fs::path dir = fresh_dir("corrupt");
  Fixture saved(1);
  save_checkpoint(dir.string(), TrainingState{3, 0, 0, 1, {}}, saved.params, saved.optimizer.get());
  fs::path model_file = dir / "iter_0000003" / "model.tp00.pp00.safetensors";
  // Flip one bit of the last byte: the data of the last tensor written (a.bias).
  {
    std::fstream f(model_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(c ^ 0x10));
  }
  Fixture loaded(2);
  expect_error_containing([&] { load_checkpoint(dir.string(), loaded.params, nullptr); },
                          {model_file.string(), "is corrupt", "damaged tensor(s): a.bias"});
  // Truncation is caught by the size the index records.
  fs::resize_file(model_file, fs::file_size(model_file) - 1);
  expect_error_containing([&] { load_checkpoint(dir.string(), loaded.params, nullptr); },
                          {model_file.string(), "truncated"});
  fs::remove_all(dir);
}

TEST(Checkpoint, KeepLastRemovesOlderIterations) {
  fs::path dir = fresh_dir("keep_last");
  Fixture saved(1);
  for (int64_t it : {1, 2, 3, 4}) save_checkpoint(dir.string(), TrainingState{it, 0, 0, 1, {}}, saved.params, nullptr, {}, 2);
  EXPECT_FALSE(fs::exists(dir / "iter_0000001"));
  EXPECT_FALSE(fs::exists(dir / "iter_0000002"));
  EXPECT_TRUE(fs::exists(dir / "iter_0000003"));
  EXPECT_TRUE(fs::exists(dir / "iter_0000004"));
  EXPECT_EQ(latest_checkpointed_iteration(dir.string()), 4);
  fs::remove_all(dir);
}

// Megatron reads the tracker as int(f.read().strip()): blanks and a CRLF around the number are fine,
// anything else is refused with the file and its text.
TEST(Checkpoint, TrackerIsReadAsMegatronReadsIt) {
  fs::path dir = fresh_dir("tracker");
  fs::create_directories(dir);
  const auto tracker = [&](const std::string& text) {
    std::ofstream(dir / "latest_checkpointed_iteration.txt", std::ios::binary) << text;
    return latest_checkpointed_iteration(dir.string());
  };
  EXPECT_EQ(tracker("4\n"), 4);
  EXPECT_EQ(tracker(" 12 \r\n\n"), 12);
  expect_error_containing([&] { tracker("4 5\n"); }, {"does not hold an iteration number: '4 5'"});
  expect_error_containing([&] { tracker("-4\n"); }, {"does not hold an iteration number: '-4'"});
  expect_error_containing([&] { tracker("\n"); }, {"does not hold an iteration number: ''"});
  fs::remove_all(dir);
}

// Expert parameters go to files named by the expert coordinates, written by expert-data-parallel rank
// 0 whatever the dense data-parallel rank; dense ones by data-parallel rank 0 whatever the expert one.
TEST(Checkpoint, ExpertParametersGoToExpertFiles) {
  fs::path dir = fresh_dir("experts");
  model::ParameterSet params;
  params.add({"a.weight", {4, 3}, model::Init::Normal, 1.0f, true});
  model::ParameterSpec expert{"decoder.layers.0.mlp.experts.local_experts.3.linear_fc1.weight", {2, 3},
                              model::Init::Normal, 1.0f, true};
  expert.expert = true;
  expert.grad_reduce = model::ParameterSpec::GradReduce::ExpertDataParallel;
  params.add(expert);
  params.allocate(1);
  optim::AdamWOptimizer optimizer(params, optim::AdamWConfig{});
  auto files = [&](const ShardPlacement& placement) {
    fs::remove_all(dir);
    save_checkpoint(dir.string(), TrainingState{1, 0, 0, 1, {}}, params, &optimizer, placement);
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir / "iter_0000001")) names.insert(e.path().filename().string());
    return names;
  };
  EXPECT_EQ(files({0, 0, nullptr, 1, 0, 3, 0}),
            (std::set<std::string>{"index.json", "model.tp00.pp01.safetensors", "optim.tp00.pp01.dp000.safetensors",
                                   "model.etp00.pp01.ep003.safetensors", "optim.etp00.pp01.ep003.edp000.safetensors"}));
  // Dense data-parallel rank 2 is expert-data-parallel rank 0 of its expert group.
  EXPECT_EQ(files({0, 2, nullptr, 0, 0, 3, 0}),
            (std::set<std::string>{"index.json", "model.etp00.pp00.ep003.safetensors",
                                   "optim.etp00.pp00.ep003.edp000.safetensors"}));
  // An expert parameter whole over the expert tensor group is written by its rank 0 only.
  EXPECT_EQ(files({0, 2, nullptr, 0, 1, 3, 0}), (std::set<std::string>{"index.json"}));
  EXPECT_EQ(files({0, 0, nullptr, 0, 0, 3, 1}),
            (std::set<std::string>{"index.json", "model.tp00.pp00.safetensors", "optim.tp00.pp00.dp000.safetensors"}));
  SafetensorsFile f = SafetensorsFile::open((dir / "iter_0000001" / "model.tp00.pp00.safetensors").string());
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a.weight"}));
  fs::remove_all(dir);
}

TEST(CheckpointDeathTest, ACrashMidSaveLeavesThePreviousCheckpointLoadable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The threadsafe death test re-runs this body in a new process: the directory must not depend on the pid.
  fs::path dir = fs::temp_directory_path() / "tessera_ckpt_test_crash_mid_save";
  fs::remove_all(dir);
  Fixture saved(1);
  save_checkpoint(dir.string(), TrainingState{5, 10, 0, 1, {}}, saved.params, saved.optimizer.get());
  EXPECT_DEATH(
      {
        ::setenv("TESSERA_CKPT_CRASH_DURING_SAVE", "1", 1);
        save_checkpoint(dir.string(), TrainingState{6, 12, 0, 1, {}}, saved.params, saved.optimizer.get());
      },
      "aborting mid-save");
  EXPECT_TRUE(fs::exists(dir / "iter_0000006.tmp" / "model.tp00.pp00.safetensors"));
  Fixture loaded(2);
  EXPECT_EQ(load_checkpoint(dir.string(), loaded.params, loaded.optimizer.get()).iteration, 5);
  expect_equal(loaded.params.values(), saved.params.values());
  fs::remove_all(dir);
}

// One rank's part of a [rows, cols] parameter split by rows over `ranks` (ranks 1: whole); a word
// embedding's rows are the vocabulary's (ParameterSpec::vocab_rows).
model::ParameterSpec row_split(const std::string& name, int64_t rows, int64_t cols, int rank, int ranks) {
  model::ParameterSpec spec{name, {rows / ranks, cols}, model::Init::Normal, 1.0f, true};
  spec.vocab_rows = name == "embedding.word_embeddings.weight";
  if (ranks > 1) spec.sharding = {{rows, cols}, {rows, cols}, 0, rank * rows / ranks, rows / ranks};
  return spec;
}

TEST(Checkpoint, LoadsIntoAnotherSplitAndRepadsTheVocabulary) {
  // Saved whole (one process): a [4, 3] weight and an [8, 3] word embedding (vocabulary padded to 8).
  fs::path dir = fresh_dir("reshard");
  model::ParameterSet whole;
  whole.add(row_split("a.weight", 4, 3, 0, 1));
  whole.add(row_split("embedding.word_embeddings.weight", 8, 3, 0, 1));
  whole.allocate(1);
  save_checkpoint(dir.string(), TrainingState{1, 0, 0, 1, {}}, whole, nullptr);
  const float* a = whole.get("a.weight").value.f32();
  const float* emb = whole.get("embedding.word_embeddings.weight").value.f32();

  for (int64_t padded : {8, 12, 4}) {
    for (int rank = 0; rank < 2; ++rank) {
      SCOPED_TRACE(str_cat("padded vocabulary ", padded, ", rank ", rank, " of 2"));
      model::ParameterSet part, fresh;
      for (model::ParameterSet* ps : {&part, &fresh}) {
        ps->add(row_split("a.weight", 4, 3, rank, 2));
        ps->add(row_split("embedding.word_embeddings.weight", padded, 3, rank, 2));
        ps->allocate(7);
      }
      load_checkpoint(dir.string(), part, nullptr);
      for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(part.get("a.weight").value.f32()[i], a[rank * 6 + i]);
      const float* got = part.get("embedding.word_embeddings.weight").value.f32();
      const float* init = fresh.get("embedding.word_embeddings.weight").value.f32();
      for (int64_t r = 0; r < padded / 2; ++r) {
        int64_t row = rank * padded / 2 + r;
        for (int64_t c = 0; c < 3; ++c)
          EXPECT_EQ(got[r * 3 + c], row < 8 ? emb[row * 3 + c] : init[r * 3 + c]) << "row " << row;
      }
    }
  }
  // Another shape of a tensor that is not a vocabulary is an error naming it.
  model::ParameterSet wrong;
  wrong.add(row_split("a.weight", 6, 3, 0, 1));
  wrong.add(row_split("embedding.word_embeddings.weight", 8, 3, 0, 1));
  wrong.allocate(1);
  expect_error_containing([&] { load_checkpoint(dir.string(), wrong, nullptr); },
                          {"a.weight", "the model expects [6, 3]"});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::ckpt

namespace tessera::ckpt {
namespace {

// --async-save's snapshot: with own_copies the save writes the values of when it was made, whatever
// training does to the live tensors before write(); the files are those save_checkpoint writes then.
TEST(CheckpointSave, OwnCopiesWriteTheValuesOfTheSaveNotTheLiveOnes) {
  const fs::path sync = fresh_dir("save_sync"), async = fresh_dir("save_async");
  Fixture f(1);
  const TrainingState state{3, 12, 0, 5, {{"hidden_size", 3}}};
  save_checkpoint(sync.string(), state, f.params, f.optimizer.get());
  CheckpointSave save(async.string(), state, f.params, f.optimizer.get(), {}, 0, {}, /*own_copies=*/true);
  EXPECT_TRUE(fs::is_directory(async / "iter_0000003.tmp"));
  EXPECT_EQ(save.tensor_bytes(), 3 * 16 * 4);  // weights and two moments of 16 values
  f.params.values().fill_(7.0f);  // training goes on while the files are written
  f.optimizer->exp_avg().fill_(7.0f);
  EXPECT_EQ(latest_checkpointed_iteration(async.string()), -1);
  std::vector<std::string> written;
  save.write([&](const std::string& path) { written.push_back(fs::path(path).filename().string()); });
  EXPECT_EQ(written, (std::vector<std::string>{"model.tp00.pp00.safetensors", "optim.tp00.pp00.dp000.safetensors"}));
  EXPECT_EQ(latest_checkpointed_iteration(async.string()), -1);  // the tracker moves only at finalize()
  save.finalize();
  EXPECT_EQ(latest_checkpointed_iteration(async.string()), 3);
  for (const char* name : {"model.tp00.pp00.safetensors", "optim.tp00.pp00.dp000.safetensors", "index.json"}) {
    std::ifstream a(sync / "iter_0000003" / name, std::ios::binary), b(async / "iter_0000003" / name, std::ios::binary);
    const std::string x{std::istreambuf_iterator<char>(a), {}}, y{std::istreambuf_iterator<char>(b), {}};
    EXPECT_FALSE(x.empty());
    EXPECT_EQ(x, y) << name << " differs from the synchronous save's";
  }
  fs::remove_all(sync);
  fs::remove_all(async);
}

// A write that fails part way (the hook throws after the first file) leaves the tracker where it was.
TEST(CheckpointSave, AFailedWriteLeavesTheTrackerOnThePreviousCheckpoint) {
  const fs::path dir = fresh_dir("save_failed");
  Fixture f(1);
  save_checkpoint(dir.string(), TrainingState{2, 8, 0, 5, {}}, f.params, f.optimizer.get());
  CheckpointSave save(dir.string(), TrainingState{4, 16, 0, 5, {}}, f.params, f.optimizer.get(), {}, 0, {}, true);
  EXPECT_THROW(save.write([](const std::string&) { throw Error("disk full"); }), Error);
  EXPECT_EQ(latest_checkpointed_iteration(dir.string()), 2);
  EXPECT_FALSE(checkpoint_complete(dir.string(), 4));
  EXPECT_TRUE(checkpoint_complete(dir.string(), 2));
  fs::remove_all(dir);
}

// Rank-local checkpoints that not every rank completed are rolled back to the one all have.
TEST(CheckpointSave, RollBackRemovesTheNewerIterations) {
  const fs::path dir = fresh_dir("rollback");
  Fixture f(1);
  for (int64_t it : {6, 8}) save_checkpoint(dir.string(), TrainingState{it, 4 * it, 0, 5, {}}, f.params, f.optimizer.get());
  EXPECT_EQ(latest_checkpointed_iteration(dir.string()), 8);
  roll_back_checkpoints(dir.string(), 6);
  EXPECT_EQ(latest_checkpointed_iteration(dir.string()), 6);
  EXPECT_FALSE(fs::exists(dir / "iter_0000008"));
  EXPECT_THROW(roll_back_checkpoints(dir.string(), 4), Error);  // no checkpoint of 4 there
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::ckpt
