// When the step reads its loss. With --no-check-for-nan-in-loss-and-grad (and no other check of the loss
// before the update) the schedule step reads the sums after the optimizer's launches are queued
// (Trainer::loss_unchecked_before_update), otherwise before the rerun machine's checks: the logged values
// must not move. Every logged value of a run with checks (none fails here) against the same run without:
// the lm loss, the auxiliary losses (MoE load balancing and z-loss, two MTP modules) and the gradient norm
// of every iteration, from metrics.jsonl at full precision, and the weights after the run, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;

const std::string kMoeMtpModel =
    "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data "
    "--tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 6 --lr 3e-3 "
    "--eval-iters 0 --hidden-dropout 0.1 --attention-dropout 0.1 --train-iters 6 --log-interval 1 "
    "--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-aux-loss-coeff 1e-2 "
    "--moe-z-loss-coeff 1e-3 --mtp-num-layers 2 ";

struct Logged {
  std::vector<nlohmann::json> lines;  // metrics.jsonl's iteration lines
  std::vector<double> losses;
  Tensor weights;
};

Logged run(const std::string& extra, const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("tessera_loss_reads_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Trainer t(parse_train_arguments(testing::split_flags(kMoeMtpModel + extra + " --log-dir " + dir.string())));
  t.train();
  Logged out;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (nlohmann::json j = nlohmann::json::parse(line); j.contains("lm_loss") && j.contains("grad_norm"))
      out.lines.push_back(j);
  out.losses = t.losses();
  out.weights = t.parameters().values().clone();
  fs::remove_all(dir);
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.host_raw(), b.host_raw(), a.nbytes()) == 0;
}

TEST(TrainerLossReads, ReadingTheLossAfterTheUpdateLogsTheSameValues) {
  const Logged checked = run("", "checked");
  const Logged unchecked = run("--no-check-for-nan-in-loss-and-grad", "unchecked");
  ASSERT_EQ(checked.lines.size(), 6u);
  ASSERT_EQ(unchecked.lines.size(), checked.lines.size());
  for (size_t i = 0; i < checked.lines.size(); ++i) {
    SCOPED_TRACE(i + 1);
    for (const char* key : {"lm_loss", "grad_norm", "load_balancing_loss", "z_loss", "mtp_1 loss", "mtp_2 loss"}) {
      ASSERT_TRUE(checked.lines[i].contains(key)) << key;
      EXPECT_EQ(unchecked.lines[i][key].get<double>(), checked.lines[i][key].get<double>()) << key;
    }
  }
  EXPECT_EQ(unchecked.losses, checked.losses);
  EXPECT_TRUE(same_bits(unchecked.weights, checked.weights));
}

}  // namespace
}  // namespace tessera::train
