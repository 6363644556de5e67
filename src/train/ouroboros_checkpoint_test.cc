// Ouroboros checkpoints in one process (train/ouroboros_checkpoint.cc): a run saved at iteration N and
// resumed equals the uninterrupted run bit for bit (losses and every module's weights), with delayed
// gradients, weight versions and activation records pending at N; the other schedule's checkpoints are
// refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "train/ouroboros_engine.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;
using testing::split_flags;

// One layer per module, dropout on, clipping on, one synchronous iteration first; 2 micro-batches.
std::string flags(int K, int iters, const std::string& extra, int global_batch = 2) {
  return str_cat("--num-layers ", K, " --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data "
                 "--tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 1 --global-batch-size ", global_batch,
                 " --lr 3e-3 --lr-warmup-iters 2 --lr-decay-iters 20 --lr-decay-style cosine --log-interval 100 "
                 "--eval-iters 0 --hidden-dropout 0.1 --attention-dropout 0.1 --clip-grad 0.05 --train-iters ", iters,
                 " --pipeline-schedule ouroboros --ouroboros-modules ", K, " --ouroboros-warmup-iters 1 ", extra);
}

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / str_cat("tessera_ouroboros_ckpt_", name, "_", ::getpid());
  fs::remove_all(p);
  return p;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.f32(), b.f32(), a.numel() * sizeof(float)) == 0;
}

// K = 3 saved after 3 iterations: module 0 holds the records and weights of mini-batches 1 and 2 and the
// error gradient of 1, module 1 those of 2. K = 4 saved by --save-interval 2 in a run of 4 (the last
// save, at 4, is the one loaded), and with 2 shares (the emulation of data parallelism). And K = 3 with
// multi-token prediction over learned positions: module 2's copy of the position embedding and the tied
// unit's moments and step count (issue 53).
TEST(OuroborosCheckpoint, ResumedRunEqualsTheUninterruptedOneBitForBit) {
  struct Case {
    int K, save_at;
    const char* save_flags;  // of the saving run
    int shares;  // 2: the emulation of 2 data-parallel replicas, over a global batch of 4
    const char* model_flags = "";  // of every run
  };
  for (const Case& c : {Case{3, 3, "", 1}, Case{4, 4, "--save-interval 2", 1}, Case{3, 3, "", 2},
                        Case{3, 3, "", 1, "--mtp-num-layers 1 --position-embedding-type learned_absolute"}}) {
    SCOPED_TRACE(str_cat("K=", c.K, " saved at ", c.save_at, " ", c.save_flags, " shares ", c.shares, " ",
                         c.model_flags));
    const int iters = c.save_at + 3;
    const fs::path dir = scratch("resume");
    auto make = [&](int train_iters, const std::string& more) {
      TrainArguments a =
          parse_train_arguments(split_flags(flags(c.K, train_iters, more + " " + c.model_flags, 2 * c.shares)));
      a.ouroboros_emulated_replicas = c.shares;
      return a;
    };
    Trainer full(make(iters, ""));
    full.train();
    {
      Trainer first(make(c.save_at, str_cat("--save ", dir.string(), " ", c.save_flags)));
      first.train();
      const OuroborosDriver& saving = *ouroboros_driver(first.engine());
      EXPECT_GT(saving.held_records(0), 0) << "something must be pending at the save";
      EXPECT_GT(saving.held_output_grads(0), 0);
    }
    Trainer second(make(iters, "--load " + dir.string()));
    OuroborosDriver& resumed = *ouroboros_driver(second.engine());
    OuroborosDriver& uninterrupted = *ouroboros_driver(full.engine());
    EXPECT_EQ(second.iteration(), c.save_at);
    EXPECT_EQ(resumed.iteration(), c.save_at);
    second.train();
    ASSERT_EQ(second.losses().size(), static_cast<size_t>(iters - c.save_at));
    for (int i = c.save_at; i < iters; ++i)
      EXPECT_EQ(second.losses()[i - c.save_at], full.losses()[i]) << "iteration " << i + 1;
    EXPECT_EQ(resumed.last_grad_norm(), uninterrupted.last_grad_norm());
    for (int k = 0; k < c.K; ++k)
      for (const model::Parameter& p : resumed.parameters(k).params())
        EXPECT_TRUE(same_bits(p.value, uninterrupted.parameters(k).get(p.spec.name).value))
            << "module " << k << " " << p.spec.name;
    fs::remove_all(dir);
  }
}

TEST(OuroborosCheckpoint, TheOtherScheduleIsRefusedByName) {
  const fs::path dir = scratch("schedules");
  Trainer(parse_train_arguments(split_flags(flags(3, 2, "--save " + dir.string())))).train();
  // A 1F1B run cannot continue the delayed rule's state.
  const std::string plain = str_cat("--num-layers 3 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data "
                                    "--tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 1 "
                                    "--global-batch-size 2 --lr 3e-3 --eval-iters 0 --train-iters 4 --load ",
                                    dir.string());
  try {
    Trainer t(parse_train_arguments(split_flags(plain)));
    ADD_FAILURE() << "a 1f1b run loaded an Ouroboros checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("saved with --pipeline-schedule ouroboros, this run has --pipeline-schedule "
                                         "1f1b"), std::string::npos) << e.what();
  }
  // Nor the reverse.
  const fs::path other = scratch("schedules_1f1b");
  Trainer(parse_train_arguments(split_flags(str_cat(plain.substr(0, plain.find("--load")), "--save ", other.string()))))
      .train();
  try {
    Trainer t(parse_train_arguments(split_flags(flags(3, 4, "--load " + other.string()))));
    ADD_FAILURE() << "an Ouroboros run loaded a 1f1b checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("saved with --pipeline-schedule 1f1b, this run has --pipeline-schedule "
                                         "ouroboros"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
  fs::remove_all(other);
}

}  // namespace
}  // namespace tessera::train
