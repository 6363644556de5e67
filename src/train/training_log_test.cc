#include "train/training_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace tessera::train
