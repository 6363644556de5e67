// The mixture-of-experts flags: what they make of the model, and the rules, checked before any work
// with the flag, the value and the rule named.
#include <gtest/gtest.h>

#include "train/args/arguments.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

const char* kBase =
    "--num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data --tokenizer-type "
    "NullTokenizer --vocab-size 40 --train-iters 1 --lr 1e-3 ";

// Four experts in every layer unless `extra` says otherwise.
TrainArguments parse(const std::string& extra, int world = 1) {
  const std::string experts = extra.find("--num-experts") == std::string::npos ? "--num-experts 4 " : "";
  return parse_train_arguments(testing::split_flags(std::string(kBase) + experts + extra), world);
}

std::string error_of(const std::string& extra, int world = 8) {
  try {
    parse(extra, world);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MoeArguments, LayerFrequencyAndPyramidGiveTheExpertsOfEachLayer) {
  EXPECT_EQ(parse("").model.moe.layer_experts, (std::vector<int64_t>{4, 4, 4, 4}));
  EXPECT_EQ(parse("--moe-layer-freq 2").model.moe.layer_experts, (std::vector<int64_t>{4, 0, 4, 0}));
  EXPECT_EQ(parse("--moe-layer-freq ([0]+[1]*3)").model.moe.layer_experts, (std::vector<int64_t>{0, 4, 4, 4}));
  EXPECT_EQ(parse("--moe-layer-freq ([0,1])*2").model.moe.layer_experts, (std::vector<int64_t>{0, 4, 0, 4}));
  // DeepSpeed's pyramid: one count per MoE layer, more experts in the last ones.
  EXPECT_EQ(parse("--num-experts 2 2 4 8").model.moe.layer_experts, (std::vector<int64_t>{2, 2, 4, 8}));
  EXPECT_TRUE(parse("--num-experts 0").model.moe.layer_experts.empty());
  const TrainArguments a = parse("--moe-router-topk 1 --mlp-type residual --moe-router-score-function sigmoid");
  EXPECT_EQ(a.model.moe.router.topk, 1);
  EXPECT_TRUE(a.model.moe.residual);
  EXPECT_EQ(a.model.moe.router.score, kernels::RouterScoreFunction::Sigmoid);
  EXPECT_EQ(a.model.moe.ffn_hidden_size, a.model.ffn_hidden_size);  // --moe-ffn-hidden-size defaults to it
  EXPECT_FALSE(a.model.moe.grouped_gemm);
  EXPECT_TRUE(parse("--moe-grouped-gemm").model.moe.grouped_gemm);
  EXPECT_EQ(parse("--tensor-model-parallel-size 2 --sequence-parallel", 2).expert_tensor_parallel_size, 2);
  EXPECT_EQ(parse("--expert-model-parallel-size 2 --expert-tensor-parallel-size 2 --global-batch-size 4", 4)
                .expert_model_parallel_size, 2);
}

TEST(MoeArguments, BadValuesAndLayoutsAreRejectedWithTheRule) {
  EXPECT_NE(error_of("--expert-model-parallel-size 3", 6).find("--num-experts=4: must be divisible by "
                                                              "--expert-model-parallel-size=3"),
            std::string::npos);
  EXPECT_NE(error_of("--expert-model-parallel-size 4", 2).find("must divide the number of ranks (2)"),
            std::string::npos);
  EXPECT_NE(error_of("--tensor-model-parallel-size 2").find("needs --sequence-parallel with MoE"), std::string::npos);
  EXPECT_NE(error_of("--moe-token-dispatcher-type flex").find("must be alltoall or allgather"), std::string::npos);
  EXPECT_NE(error_of("--moe-layer-freq ([1]*3)").find("has 3 entries for --num-layers=4"), std::string::npos);
  EXPECT_NE(error_of("--moe-layer-freq [1,2,0,0]").find("entries must be 0 or 1"), std::string::npos);
  EXPECT_NE(error_of("--moe-layer-freq [1,").find("--moe-layer-freq=[1,: expected a number"), std::string::npos);
  EXPECT_NE(error_of("--num-experts 4 4").find("--num-experts=4 4: 2 values; must be one, or one per MoE layer (4)"),
            std::string::npos);
  EXPECT_NE(error_of("--moe-router-topk 5").find("--moe-router-topk=5: must be in [1, 4]"), std::string::npos);
  EXPECT_NE(error_of("--moe-pad-expert-input-to-capacity").find("needs --moe-expert-capacity-factor"),
            std::string::npos);
  EXPECT_NE(error_of("--moe-router-load-balancing-type sinkhorn").find("must be one of aux_loss, seq_aux_loss, none"),
            std::string::npos);
  EXPECT_NE(error_of("--expert-tensor-parallel-size 3", 6).find("--moe-ffn-hidden-size=128: must be divisible by "
                                                               "--expert-tensor-parallel-size=3"),
            std::string::npos);
  // A pipeline stage of dense layers only joins the expert gradients' norm with nothing (Megatron accepts it).
  EXPECT_EQ(error_of("--moe-layer-freq [1,1,0,0] --pipeline-model-parallel-size 2 --use-distributed-optimizer"), "");
  EXPECT_NE(error_of("--num-experts 0 --expert-model-parallel-size 2").find("needs --num-experts"), std::string::npos);
}

}  // namespace
}  // namespace tessera::train
