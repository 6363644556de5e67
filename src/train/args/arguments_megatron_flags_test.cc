// The Megatron flags its example scripts (gpt3, llama, mixtral, bert, deepseek_v3) use that Tessera used to
// refuse as unknown: --encoder-seq-length (the sequence length), --cp-comm-type (p2p is the ring attention),
// the counted pipeline split (--account-for-embedding/loss-in-pipeline-split), --no-position-embedding, the
// switches accepted with no effect here, and the flags refused by name with the reason.
#include <gtest/gtest.h>

#include <string>

#include "core/check.h"
#include "train/args/arguments.h"
#include "train/args/megatron_compat_flags.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

using testing::split_flags;

const std::string kBase = testing::kSmallRunFlags;

TrainArguments parse(const std::string& extra, int64_t world = 1) {
  return parse_train_arguments(split_flags(kBase + extra), world);
}

std::string error_of(const std::string& flags, int64_t world = 1) {
  try {
    parse_train_arguments(split_flags(flags), world);
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

// kBase without its --seq-length 16.
std::string without_seq_length() {
  std::string flags = kBase;
  flags.erase(flags.find("--seq-length 16 "), 16);
  return flags;
}

// Megatron copies --encoder-seq-length into --seq-length (GPT and BERT have no separate encoder).
TEST(MegatronFlags, EncoderSeqLengthIsTheSequenceLength) {
  EXPECT_EQ(parse_train_arguments(split_flags(without_seq_length() + "--encoder-seq-length 32")).model.seq_length, 32);
  EXPECT_EQ(parse("--encoder-seq-length 16").model.seq_length, 16);  // both, agreeing
  EXPECT_EQ(error_of(kBase + "--encoder-seq-length 32"),
            "--encoder-seq-length=32: must equal --seq-length=16 (both are the sequence length of this model; give "
            "one of them)");
  EXPECT_EQ(error_of(without_seq_length() + "--encoder-seq-length 0"), "--encoder-seq-length=0: must be positive");
  EXPECT_EQ(error_of(without_seq_length()),
            "--seq-length is required (or Megatron's --encoder-seq-length): the sequence length");
  // With learned absolute positions the positions follow it, as they follow --seq-length.
  const TrainArguments bert = parse_train_arguments(
      split_flags(without_seq_length() + "--encoder-seq-length 24 --max-position-embeddings 24"));
  EXPECT_EQ(bert.model.seq_length, 24);
  EXPECT_NE(error_of(without_seq_length() + "--encoder-seq-length 24 --max-position-embeddings 20")
                .find("--max-position-embeddings=20: must be >= --seq-length=24"),
            std::string::npos);
}

// --cp-comm-type p2p is Tessera's ring attention, once or once per layer; the other algorithms are refused
// by name where they would run (cp > 1), and change nothing without context parallelism, as in Megatron.
TEST(MegatronFlags, CpCommTypeP2pIsTheRingAttention) {
  const std::string cp2 = "--context-parallel-size 2 ";
  EXPECT_EQ(parse(cp2 + "--cp-comm-type p2p", 2).cp_comm_type, std::vector<std::string>{"p2p"});
  EXPECT_EQ(parse(cp2 + "--cp-comm-type p2p p2p", 2).cp_comm_type.size(), 2u);  // one per layer (2 layers)
  EXPECT_EQ(error_of(kBase + cp2 + "--cp-comm-type a2a", 2),
            "--cp-comm-type=a2a: cannot be used with --context-parallel-size=2: Tessera's context parallelism is ring "
            "attention (Megatron's p2p); Megatron's all-to-all (Ulysses-style: heads scattered over the cp ranks) is "
            "not built");
  EXPECT_NE(error_of(kBase + cp2 + "--cp-comm-type allgather", 2).find("all-gather of the keys and values is not built"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + cp2 + "--cp-comm-type p2p a2a+p2p", 2).find("--cp-comm-type=a2a+p2p: cannot be used"),
            std::string::npos);
  EXPECT_EQ(error_of(kBase + cp2 + "--cp-comm-type p2p p2p p2p", 2),
            "--cp-comm-type=3 values: must be one value or one per layer (--num-layers=2)");
  EXPECT_EQ(error_of(kBase + "--cp-comm-type ring"),
            "--cp-comm-type=ring: must be p2p, a2a, allgather or a2a+p2p (Megatron's values)");
  EXPECT_EQ(parse("--cp-comm-type a2a").cp_comm_type, std::vector<std::string>{"a2a"});  // cp 1: no effect
  // Given twice, the last occurrence counts (a script's override).
  EXPECT_EQ(parse(cp2 + "--cp-comm-type a2a --cp-comm-type p2p", 2).cp_comm_type, std::vector<std::string>{"p2p"});
}

// Megatron-Core's counted split: the embedding and/or the loss count as one layer each, the total split
// evenly; the layout the trainer builds from it, and each rule broken, named.
TEST(MegatronFlags, AccountForEmbeddingAndLossCountThemAsLayers) {
  const std::string split = "--num-layers 6 --pipeline-model-parallel-size 4 --global-batch-size 8 ";
  const TrainArguments a =
      parse(split + "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split", 4);
  EXPECT_TRUE(a.layer_split.embedding);
  EXPECT_TRUE(a.layer_split.loss);
  for (int stage = 0; stage < 4; ++stage)
    EXPECT_EQ(pipeline::stage_layer_count(a.layer_split, 4, stage), stage == 0 || stage == 3 ? 1 : 2);
  // Interleaved: 6 + 2 = 8 over 2 stages x 2 virtual stages, by either interleaving flag.
  const std::string pp2 = "--num-layers 6 --pipeline-model-parallel-size 2 --global-batch-size 8 "
                          "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split ";
  EXPECT_EQ(parse(pp2 + "--num-layers-per-virtual-pipeline-stage 2", 2).virtual_pipeline_size, 2);
  EXPECT_EQ(parse(pp2 + "--num-virtual-stages-per-pipeline-rank 2", 2).virtual_pipeline_size, 2);
  EXPECT_EQ(error_of(kBase + pp2 + "--num-layers-per-virtual-pipeline-stage 3", 2),
            "--num-layers-per-virtual-pipeline-stage=3: must divide the 4 layers of each pipeline stage (the embedding "
            "or the loss counted as one)");
  EXPECT_EQ(error_of(kBase + split + "--account-for-embedding-in-pipeline-split", 4),
            "--account-for-embedding-in-pipeline-split: --num-layers=6 + 1 (the embedding) = 7 must be divisible by "
            "--pipeline-model-parallel-size=4");
  EXPECT_EQ(error_of(kBase + split + "--account-for-loss-in-pipeline-split --decoder-first-pipeline-num-layers 2", 4),
            "--account-for-loss-in-pipeline-split cannot be combined with --decoder-first-pipeline-num-layers or "
            "--decoder-last-pipeline-num-layers (as in Megatron-Core: give one way of splitting the layers)");
  EXPECT_NE(error_of(kBase + "--num-layers 6 --pipeline-model-parallel-size 2 --global-batch-size 8 "
                             "--account-for-loss-in-pipeline-split --account-for-embedding-in-pipeline-split "
                             "--zero-bubble-v-schedule",
                     2)
                .find("cannot be combined with --zero-bubble-v-schedule"),
            std::string::npos);
  // --recompute-num-layers is bounded by the smallest model chunk that has layers (here 1).
  EXPECT_EQ(error_of(kBase + split +
                         "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split "
                         "--recompute-granularity full --recompute-method block --recompute-num-layers 2",
                     4),
            "--recompute-num-layers=2: must be in [1, 1] (the layers of one model chunk)");
  // Without them, 6 layers over 4 stages is the even split's error as before.
  EXPECT_EQ(error_of(kBase + split, 4), "--num-layers=6: must be divisible by --pipeline-model-parallel-size=4");
}

TEST(MegatronFlags, NoPositionEmbeddingGoesWithRopeOnly) {
  EXPECT_NO_THROW(parse("--position-embedding-type rope --no-position-embedding"));
  EXPECT_EQ(error_of(kBase + "--no-position-embedding"),
            "--no-position-embedding=true: is deprecated (as in Megatron): give --position-embedding-type; with "
            "learned_absolute the model has a position embedding");
}

// Switches for machinery Tessera does not have, accepted and named with what Tessera does instead.
TEST(MegatronFlags, ExampleScriptsSwitchesWithoutEffectAreAcceptedAndNamed) {
  const TrainArguments a = parse(
      "--cross-entropy-loss-fusion --moe-permute-fusion --use-nccl-ub --manual-gc --manual-gc-interval 10 "
      "--no-create-attention-mask-in-dataloader --no-mmap-bin-files --attention-backend fused "
      "--empty-unused-memory-level 1 --profile --profile-step-start 4 --profile-step-end 6 --profile-ranks 0 1 "
      "--recompute-modules core_attn --moe-router-dtype fp32 --dist-ckpt-strictness log_all --logging-level 20 "
      "--log-num-zeros-in-grad --log-memory-to-tensorboard --init-model-with-meta-device --auto-detect-ckpt-format "
      "--enable-experimental --wandb-project p --wandb-exp-name run-1 --tiktoken-pattern v2 --calculate-per-token-loss");
  const std::string note = megatron_compat_note(a.megatron_compat_flags);
  EXPECT_EQ(a.megatron_compat_flags.size(), 26u) << note;
  for (const char* line : {"--profile-ranks 0 1 (", "--recompute-modules core_attn (", "--attention-backend fused (",
                           "--moe-router-dtype fp32 (the router's gating is always computed in fp32)"})
    EXPECT_NE(note.find(line), std::string::npos) << line << " not in " << note;
  EXPECT_EQ(error_of(kBase + "--recompute-modules core_attn mlp"),
            "--recompute-modules=mlp: --recompute-granularity selective recomputes the core attention (Megatron's "
            "core_attn); recomputing other modules is not built");
  EXPECT_NE(error_of(kBase + "--recompute-modules attn").find("--recompute-modules=attn: must be some of core_attn"),
            std::string::npos);
  EXPECT_EQ(error_of(kBase + "--moe-router-dtype fp64"),
            "--moe-router-dtype=fp64: Tessera computes the router's gating in fp32 (Megatron's --moe-router-dtype "
            "fp32); fp64 is not built");
  EXPECT_NE(error_of(kBase + "--attention-backend cudnn").find("must be one of auto flash fused unfused local"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "--profile-ranks 0 x").find("--profile-ranks=x: must be counts >= 0"), std::string::npos);
  EXPECT_NE(error_of(kBase + "--tiktoken-pattern v3").find("must be one of v1 v2"), std::string::npos);
}

// Features Tessera does not have stop the run naming the flag and why, values and all.
TEST(MegatronFlags, FlagsForMissingFeaturesAreRefusedByName) {
  EXPECT_EQ(error_of(kBase + "--fp8-format hybrid"),
            "--fp8-format=hybrid: FP8 training is not built (Tessera trains in fp32, --bf16 or --fp16)");
  EXPECT_EQ(error_of(kBase + "--use-megatron-fsdp"),
            "--use-megatron-fsdp: Megatron-FSDP is not built; --use-distributed-optimizer shards the optimizer state "
            "over the data-parallel ranks (Megatron's ZeRO-1)");
  EXPECT_NE(error_of(kBase + "--decoupled-lr 1e-4").find("--decoupled-lr=1e-4: a separate learning rate"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "--hierarchical-context-parallel-sizes 2 2").find("--hierarchical-context-parallel-sizes=2 2:"),
            std::string::npos);
  for (const char* flag : {"--grad-reduce-in-bf16", "--apply-layernorm-1p",
                           "--fp8-param-gather", "--moe-router-force-load-balancing"})
    EXPECT_EQ(error_of(kBase + flag).rfind(str_cat(flag, ": "), 0), 0u) << flag << ": " << error_of(kBase + flag);
}

}  // namespace
}  // namespace tessera::train
