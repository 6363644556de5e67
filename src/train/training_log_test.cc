#include "train/training_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <cstdlib>

namespace tessera::train {
namespace {

TEST(TrainingLog, AuxiliaryLossesFollowTheLmLossByName) {
  IterationStats s;
  s.iteration = 3;
  s.train_iters = 10;
  s.lm_loss = 2.5;
  s.auxiliary_losses = {{"load balancing loss", 0.125}, {"z loss", 3e-4}};
  const std::string line = format_iteration_line(s);
  const size_t lm = line.find(" lm loss: 2.500000E+00 |");
  const size_t balance = line.find(" load balancing loss: 1.250000E-01 |");
  const size_t z = line.find(" z loss: 3.000000E-04 |");
  ASSERT_NE(lm, std::string::npos) << line;
  ASSERT_NE(balance, std::string::npos) << line;
  ASSERT_NE(z, std::string::npos) << line;
  EXPECT_LT(lm, balance);
  EXPECT_LT(balance, z);
  EXPECT_LT(z, line.find(" loss scale:"));

  IterationStats plain = s;
  plain.auxiliary_losses.clear();
  EXPECT_EQ(format_iteration_line(plain).find("z loss"), std::string::npos);

  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "tessera_training_log_test";
  fs::remove_all(dir);
  {
    TrainingLog log(dir.string(), "");
    log.iteration(s);
  }
  std::ifstream in(dir / "metrics.jsonl");
  std::string json_line;
  ASSERT_TRUE(std::getline(in, json_line));
  const nlohmann::json j = nlohmann::json::parse(json_line);
  EXPECT_DOUBLE_EQ(j.at("z loss").get<double>(), 3e-4);
  EXPECT_DOUBLE_EQ(j.at("lm_loss").get<double>(), 2.5);
  fs::remove_all(dir);
}

TEST(TrainingLog, ValidationLineHasBitsPerByteWhenKnown) {
  Evaluation e{2.0, 1.5};
  EXPECT_EQ(format_validation_line(7, e),
            " validation loss at iteration 7 | lm loss value: 2.000000E+00 | lm loss PPL: 7.389056E+00 | "
            "bits per byte: 1.5000 | ");
  e.bits_per_byte.reset();
  EXPECT_EQ(format_validation_line(7, e, "test"),
            " validation loss at iteration 7 on test set | lm loss value: 2.000000E+00 | lm loss PPL: 7.389056E+00 | ");

  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "tessera_training_log_validation_test";
  fs::remove_all(dir);
  {
    TrainingLog log(dir.string(), "");
    log.validation(7, Evaluation{2.0, 1.5});
    log.final_evaluation(9, "test", Evaluation{3.0, std::nullopt});
  }
  std::ifstream in(dir / "metrics.jsonl");
  std::string first, second;
  ASSERT_TRUE(std::getline(in, first) && std::getline(in, second));
  EXPECT_EQ(nlohmann::json::parse(first), (nlohmann::json{{"iteration", 7}, {"validation_lm_loss", 2.0},
                                                          {"validation_bits_per_byte", 1.5}}));
  EXPECT_EQ(nlohmann::json::parse(second), (nlohmann::json{{"iteration", 9}, {"test_lm_loss", 3.0}}));
  fs::remove_all(dir);
}

TEST(TrainingLog, NoProgressBarUnderALauncherUnlessAsked) {
  ::setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  ::unsetenv("TESSERA_PROGRESS");
  EXPECT_FALSE(progress_bar_wanted());
  ::setenv("TESSERA_PROGRESS", "1", 1);
  EXPECT_TRUE(progress_bar_wanted());
  ::setenv("TESSERA_PROGRESS", "0", 1);
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  EXPECT_FALSE(progress_bar_wanted());
  ::unsetenv("TESSERA_PROGRESS");
}

}  // namespace
}  // namespace tessera::train
