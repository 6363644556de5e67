// The multi-token prediction flags: Megatron-Core's names and defaults, what MTP runs with (token slices,
// context parallelism), and what it does not run with, refused by name before any work.
#include <gtest/gtest.h>

#include "train/args/arguments.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

std::string mtp_error_of(const std::string& extra, int world = 1) {
  try {
    parse_train_arguments(testing::split_flags(testing::kSmallRunFlags + extra), world);
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

TEST(MtpArguments, MegatronsNamesAndDefaults) {
  TrainArguments a = parse_train_arguments(testing::split_flags(testing::kSmallRunFlags));
  EXPECT_EQ(a.model.mtp_num_layers, 0);  // Megatron's None: off
  EXPECT_EQ(a.model.mtp_loss_scaling_factor, 0.1f);
  a = parse_train_arguments(testing::split_flags(testing::kSmallRunFlags +
                                                 "--mtp-num-layers 2 --mtp-loss-scaling-factor 0.3"));
  EXPECT_EQ(a.model.mtp_num_layers, 2);
  EXPECT_EQ(a.model.mtp_loss_scaling_factor, 0.3f);
}

TEST(MtpArguments, TheModulesLayersAreMixturesOfExpertsAsTheLast) {
  const TrainArguments a = parse_train_arguments(testing::split_flags(
      testing::kSmallRunFlags + "--mtp-num-layers 2 --num-experts 4 --moe-layer-freq ([0]+[1]*1)"));
  EXPECT_EQ(a.model.moe.layer_experts, (std::vector<int64_t>{0, 4, 4, 4}));
  const TrainArguments dense_last = parse_train_arguments(testing::split_flags(
      testing::kSmallRunFlags + "--mtp-num-layers 1 --num-experts 4 --moe-layer-freq ([1]+[0]*1)"));
  EXPECT_EQ(dense_last.model.moe.layer_experts, (std::vector<int64_t>{4, 0, 0}));
}

TEST(MtpArguments, UnsupportedCombinationsAreRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--mtp-num-layers -1", "must not be negative"},
      {"--mtp-num-layers 1 --mtp-loss-scaling-factor -0.5", "--mtp-loss-scaling-factor"},
      {"--mtp-num-layers 1 --model-family bert", "--model-family bert"},
  };
  for (const auto& [flags, expected] : cases) {
    const std::string error = mtp_error_of(flags, 2);
    EXPECT_NE(error.find(expected), std::string::npos) << flags << ": " << error;
    if (flags.find("-1") == std::string::npos && flags.find("-0.5") == std::string::npos) {
      EXPECT_NE(error.find("--mtp-num-layers"), std::string::npos) << flags << ": " << error;
    }
  }
  // Under pipeline parallelism the last stage keeps copies of the word and position embeddings (issue 53).
  for (const std::string& flags : {std::string("--pipeline-model-parallel-size 2"),
                                   std::string("--pipeline-model-parallel-size 2 --untie-embeddings-and-output-weights"),
                                   std::string("--pipeline-model-parallel-size 2 --position-embedding-type rope "
                                               "--untie-embeddings-and-output-weights"),
                                   std::string("--pipeline-model-parallel-size 2 --position-embedding-type rope")})
    EXPECT_EQ(mtp_error_of("--mtp-num-layers 1 " + flags, 2), "accepted") << flags;
  // Token slices: the modules run over the whole sequence after the last slice (issue 53); what slices
  // themselves do not run with is refused by their rules, naming their flag.
  EXPECT_EQ(mtp_error_of("--mtp-num-layers 1 --pipeline-token-slices 2", 1), "accepted");
  EXPECT_EQ(mtp_error_of("--mtp-num-layers 2 --pipeline-model-parallel-size 2 --position-embedding-type rope "
                         "--pipeline-token-slices 2",
                         2),
            "accepted");
  EXPECT_NE(mtp_error_of("--mtp-num-layers 1 --pipeline-token-slices 2 --num-experts 4", 1)
                .find("--pipeline-token-slices=2: cannot be combined with mixture-of-experts"),
            std::string::npos);
  // Ouroboros runs the modules on its last module, which looks tokens up in its copy of the tied
  // embedding and, with learned absolute positions, positions in its copy of the position embedding,
  // tied to module 0's as the word embedding is (issue 53); one module is the whole model.
  EXPECT_EQ(mtp_error_of("--mtp-num-layers 2 --pipeline-schedule ouroboros --position-embedding-type rope", 1),
            "accepted");
  EXPECT_EQ(mtp_error_of("--mtp-num-layers 1 --pipeline-schedule ouroboros", 1), "accepted");
  EXPECT_EQ(mtp_error_of("--mtp-num-layers 2 --pipeline-schedule ouroboros --ouroboros-modules 2 "
                         "--position-embedding-type learned_absolute",
                         1),
            "accepted");
  EXPECT_EQ(mtp_error_of("--mtp-num-layers 1 --pipeline-schedule ouroboros --ouroboros-modules 1", 1), "accepted");
  // Context parallelism rolls across the ranks' chunks (issue 53).
  EXPECT_EQ(mtp_error_of("--mtp-num-layers 1 --context-parallel-size 2", 2), "accepted");
  EXPECT_EQ(mtp_error_of("--mtp-num-layers 1 --context-parallel-size 2 --multi-latent-attention", 2), "accepted");
  // The GPU path runs MTP (issue 53): --device cuda is accepted where a GPU is usable and refused only for
  // the want of one elsewhere (train/device_setup_test.cc has the rules on fake machines).
  const std::string on_gpu = mtp_error_of("--mtp-num-layers 1 --device cuda", 1);
  EXPECT_TRUE(on_gpu == "accepted" || on_gpu.rfind("--device=cuda: no usable GPU: ", 0) == 0) << on_gpu;
  EXPECT_EQ(mtp_error_of("--mtp-num-layers 1 --tensor-model-parallel-size 2 --sequence-parallel "
                         "--untie-embeddings-and-output-weights", 2),
            "accepted");
}

}  // namespace
}  // namespace tessera::train
