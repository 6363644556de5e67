#include "train/args/arguments.h"

#include <gtest/gtest.h>

#include <string>

#include "core/check.h"
#include "train/args/megatron_compat_flags.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

using testing::split_flags;

// A small valid run; each case appends flags (a flag given twice takes its last value).
const std::string kBase = testing::kSmallRunFlags;

TrainArguments parse(const std::string& extra, int64_t world = 1) {
  return parse_train_arguments(split_flags(kBase + extra), world);
}

// The message of the Error the flags raise, or "accepted".
std::string error_of(const std::string& flags, int64_t world = 1) {
  try {
    parse_train_arguments(split_flags(flags), world);
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

struct RuleCase {
  const char* extra;  // appended to kBase
  int64_t world;
  const char* message;
};

// Every rule of finalize(), each broken alone: the message names the flag, the value and the rule.
class TrainArgumentsRule : public ::testing::TestWithParam<RuleCase> {};

TEST_P(TrainArgumentsRule, NamesFlagValueAndRule) {
  const RuleCase& c = GetParam();
  EXPECT_EQ(error_of(kBase + c.extra, c.world), c.message) << c.extra;
}

const RuleCase kModelRules[] = {
    {"--num-layers 0", 1, "--num-layers=0: must be positive"},
    {"--hidden-size 0", 1, "--hidden-size=0: must be positive"},
    {"--num-attention-heads 0", 1, "--num-attention-heads=0: must be positive"},
    {"--seq-length 0", 1, "--seq-length=0: must be positive"},
    {"--num-attention-heads 5", 1, "--hidden-size=32: must be divisible by --num-attention-heads=5 (or set --kv-channels)"},
    {"--kv-channels -1", 1, "--kv-channels=-1: must be positive"},
    {"--group-query-attention --num-query-groups 0", 1, "--num-query-groups=0: must be positive"},
    {"--group-query-attention --num-query-groups 3", 1, "--num-query-groups=3: must divide --num-attention-heads=4"},
    {"--ffn-hidden-size -4", 1, "--ffn-hidden-size=-4: must be positive"},
    {"--max-position-embeddings 8", 1,
     "--max-position-embeddings=8: must be >= --seq-length=16 with learned absolute positions"},
    {"--position-embedding-type alibi", 1, "--position-embedding-type=alibi: must be learned_absolute or rope"},
    {"--rotary-percent 0", 1, "--rotary-percent=0: must be in (0, 1]"},
    {"--position-embedding-type rope --rotary-percent 0.1", 1,
     "--rotary-percent=0.1: rotates fewer than 2 dimensions of each head"},
    {"--rotary-base 0", 1, "--rotary-base=0: must be positive"},
    {"--use-rope-scaling", 1, "--use-rope-scaling=set: needs --position-embedding-type rope"},
    {"--position-embedding-type rope --use-rope-scaling --rope-scaling-factor 0", 1,
     "--rope-scaling-factor=0: must be positive"},
    {"--position-embedding-type rope --use-rope-scaling --rotary-seq-len-interpolation-factor 2", 1,
     "--rotary-seq-len-interpolation-factor=2: cannot be combined with --use-rope-scaling"},
    {"--rotary-seq-len-interpolation-factor 2", 1,
     "--rotary-seq-len-interpolation-factor=2: needs --position-embedding-type rope"},
    {"--position-embedding-type rope --rotary-seq-len-interpolation-factor -1", 1,
     "--rotary-seq-len-interpolation-factor=-1: must be positive"},
    {"--normalization BatchNorm", 1, "--normalization=BatchNorm: must be LayerNorm or RMSNorm"},
    {"--norm-epsilon 0", 1, "--norm-epsilon=0: must be positive"},
    {"--hidden-dropout 1.5", 1, "--hidden-dropout=1.5: must be in [0, 1)"},
    {"--attention-dropout 1", 1, "--attention-dropout=1: must be in [0, 1)"},
    {"--init-method-std 0", 1, "--init-method-std=0: must be positive"},
    {"--init-method-std inf", 1, "--init-method-std=inf: must be a finite number"},
    {"--norm-epsilon inf", 1, "--norm-epsilon=inf: must be a finite number"},
    {"--make-vocab-size-divisible-by 0", 1, "--make-vocab-size-divisible-by=0: must be positive"},
};
INSTANTIATE_TEST_SUITE_P(Model, TrainArgumentsRule, ::testing::ValuesIn(kModelRules));

const RuleCase kLayoutRules[] = {
    {"--tensor-model-parallel-size 0", 1, "--tensor-model-parallel-size=0: must be positive"},
    {"--pipeline-model-parallel-size 0", 1, "--pipeline-model-parallel-size=0: must be positive"},
    {"--pipeline-model-parallel-size 3", 3, "--num-layers=2: must be divisible by --pipeline-model-parallel-size=3"},
    {"--num-layers-per-virtual-pipeline-stage 1 --num-virtual-stages-per-pipeline-rank 1", 1,
     "--num-layers-per-virtual-pipeline-stage=1: cannot be combined with --num-virtual-stages-per-pipeline-rank"},
    {"--num-layers-per-virtual-pipeline-stage -1", 1, "--num-layers-per-virtual-pipeline-stage=-1: must be positive"},
    {"--num-virtual-stages-per-pipeline-rank -1", 1, "--num-virtual-stages-per-pipeline-rank=-1: must be positive"},
    {"--num-layers 4 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3", 2,
     "--num-layers-per-virtual-pipeline-stage=3: must divide the 2 layers of each pipeline stage"},
    {"--num-layers 4 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 3", 2,
     "--num-virtual-stages-per-pipeline-rank=3: must divide the 2 layers of each pipeline stage"},
    {"--num-layers-per-virtual-pipeline-stage 1", 1,
     "--num-layers-per-virtual-pipeline-stage=1: the interleaved schedule needs --pipeline-model-parallel-size > 1"},
    {"--tensor-model-parallel-size 2", 1,
     "--tensor-model-parallel-size=2: x --pipeline-model-parallel-size=1 must divide the number of ranks (1)"},
    {"--num-attention-heads 2 --tensor-model-parallel-size 4", 4,
     "--num-attention-heads=2: must be divisible by --tensor-model-parallel-size=4"},
    {"--group-query-attention --num-query-groups 1 --tensor-model-parallel-size 2", 2,
     "--num-query-groups=1: must be divisible by --tensor-model-parallel-size=2"},
    {"--ffn-hidden-size 33 --tensor-model-parallel-size 2", 2,
     "--ffn-hidden-size=33: must be divisible by --tensor-model-parallel-size=2"},
    {"--seq-length 15 --tensor-model-parallel-size 2 --sequence-parallel", 2,
     "--seq-length=15: must be divisible by --tensor-model-parallel-size=2 with --sequence-parallel"},
    {"--ddp-bucket-size 0", 1, "--ddp-bucket-size=0: must be positive"},
    {"--recompute-activations --recompute-granularity full --recompute-method block", 1,
     "--recompute-activations=true: contradicts --recompute-granularity=full"},
    {"--recompute-granularity partial", 1, "--recompute-granularity=partial: must be full or selective"},
    {"--recompute-granularity full", 1,
     "--recompute-method=(none): must be uniform or block with --recompute-granularity full"},
    {"--recompute-granularity full --recompute-method uniform --recompute-num-layers 5", 1,
     "--recompute-num-layers=5: must be in [1, 2] (the layers of one model chunk)"},
    {"--recompute-method block", 1, "--recompute-method=block: needs --recompute-granularity full"},
    {"--recompute-num-layers 1", 1, "--recompute-num-layers=1: needs --recompute-granularity full"},
    {"--overlap-param-gather --overlap-grad-reduce", 1, "--overlap-param-gather=true: needs --use-distributed-optimizer"},
    {"--overlap-param-gather --use-distributed-optimizer", 1, "--overlap-param-gather=true: needs --overlap-grad-reduce"},
    {"--distributed-timeout-minutes 0", 1, "--distributed-timeout-minutes=0: must be positive"},
};
INSTANTIATE_TEST_SUITE_P(ParallelLayout, TrainArgumentsRule, ::testing::ValuesIn(kLayoutRules));

const RuleCase kDataRules[] = {
    {"--data-path corpus", 1,
     "--data-path=corpus: give exactly one of --mock-data and --data-path (or --train-data-path, --valid-data-path, "
     "--test-data-path)"},
    {"--test-data-path t --train-data-path a", 1,
     "--mock-data=set: given with --train-data-path: give either --mock-data or the dataset paths"},
    {"--data-path corpus --valid-data-path v", 1,
     "--data-path=corpus: given with --valid-data-path: give either --data-path (with --split) or --train-data-path, "
     "--valid-data-path and --test-data-path, not both"},
    {"--tokenizer-type GPT2BPETokenizer", 1,
     "--tokenizer-type=GPT2BPETokenizer: --mock-data needs --tokenizer-type NullTokenizer"},
    {"--vocab-size 1", 1, "--vocab-size=1: the NullTokenizer needs a vocabulary of at least 2"},
    {"--micro-batch-size 0", 1, "--micro-batch-size=0: must be positive"},
    {"--global-batch-size -2", 1, "--global-batch-size=-2: must be positive"},
    {"--global-batch-size 0", 1, "--global-batch-size=0: must be positive"},
    {"--global-batch-size 5", 1, "--global-batch-size=5: must be divisible by --micro-batch-size=2 x data-parallel size=1"},
    {"--global-batch-size 6", 2, "--global-batch-size=6: must be divisible by --micro-batch-size=2 x data-parallel size=2"},
    {"--num-layers 4 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 --micro-batch-size 1 "
     "--global-batch-size 3",
     2,
     "--global-batch-size=3: gives 3 micro-batches per pipeline (global batch / (micro batch x data-parallel size)); "
     "the interleaved schedule needs a multiple of --pipeline-model-parallel-size=2"},
};
INSTANTIATE_TEST_SUITE_P(Data, TrainArgumentsRule, ::testing::ValuesIn(kDataRules));

const RuleCase kTrainingLoopRules[] = {
    {"--train-iters 0", 1, "--train-iters=0: must be positive"},
    {"--eval-interval 0", 1, "--eval-interval=0: must be positive"},
    {"--eval-iters -1", 1, "--eval-iters=-1: must be >= 0"},
    {"--log-interval 0", 1, "--log-interval=0: must be positive"},
    {"--max-nan-iterations 0", 1, "--max-nan-iterations=0: must be positive"},
    {"--sample-interval -1", 1, "--sample-interval=-1: must be >= 0"},
    {"--sample-interval 5", 1, "--sample-interval=5: needs --sample-prompt TEXT"},
    {"--sample-interval 5 --sample-prompt hi --pipeline-model-parallel-size 2", 2,
     "--sample-interval=5: is not supported with --pipeline-model-parallel-size > 1 yet"},
};
INSTANTIATE_TEST_SUITE_P(TrainingLoop, TrainArgumentsRule, ::testing::ValuesIn(kTrainingLoopRules));

// Megatron's sample-based training and batch-size ramp (the base run has --train-iters 1, a global
// batch of 4 and micro-batches of 2).
#define SAMPLES "--train-iters 0 --train-samples 16 "
const RuleCase kSampleBasedRules[] = {
    {"--train-samples 16", 1, "--train-iters=1: cannot be combined with --train-samples"},
    {"--train-iters 0 --train-samples -4", 1, "--train-samples=-4: must be positive"},
    {"--train-iters 0 --train-samples 3", 1, "--train-samples=3: is less than one global batch of 4 samples"},
    {"--lr-decay-samples 8", 1, "--lr-decay-samples=8: is for --train-samples; with --train-iters use --lr-decay-iters"},
    {"--lr-warmup-samples 8", 1,
     "--lr-warmup-samples=8: is for --train-samples; with --train-iters use --lr-warmup-iters"},
    {"--rampup-batch-size 2 2 8", 1,
     "--rampup-batch-size=2 2 8: needs --train-samples: Megatron ramps the batch size only in sample-based training"},
    {SAMPLES "--lr-decay-iters 4", 1,
     "--lr-decay-iters=4: is for --train-iters; with --train-samples use --lr-decay-samples"},
    {SAMPLES "--lr-warmup-iters 1", 1,
     "--lr-warmup-iters=1: is for --train-iters; with --train-samples use --lr-warmup-samples"},
    {SAMPLES "--lr-decay-samples -1", 1, "--lr-decay-samples=-1: must be positive"},
    {SAMPLES "--lr-warmup-samples 16", 1, "--lr-warmup-samples=16: must be less than --lr-decay-samples=16"},
    {SAMPLES "--lr-warmup-samples 2 --lr-warmup-fraction 0.5", 1,
     "--lr-warmup-fraction=0.5: cannot be combined with --lr-warmup-samples"},
    {SAMPLES "--rampup-batch-size 0 2 8", 1,
     "--rampup-batch-size=0 2 8: START and INCREMENT must be positive and SAMPLES at least 0"},
    {SAMPLES "--rampup-batch-size 8 2 8", 1, "--rampup-batch-size=8 2 8: START must not exceed --global-batch-size=4"},
    {SAMPLES "--global-batch-size 8 --rampup-batch-size 2 4 8", 1,
     "--rampup-batch-size=2 4 8: --global-batch-size=8 minus START must be a multiple of INCREMENT"},
    {SAMPLES "--global-batch-size 8 --rampup-batch-size 3 5 8", 1,
     "--rampup-batch-size=3 5 8: passes through a global batch of 3, which must be divisible by "
     "--micro-batch-size=2 x data-parallel size=1"},
    {SAMPLES "--num-layers 4 --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
             "--micro-batch-size 1 --rampup-batch-size 2 1 8",
     2,
     "--rampup-batch-size=2 1 8: passes through a global batch of 3, which gives 3 micro-batches per pipeline "
     "(global batch / (micro batch x data-parallel size)); the interleaved schedule needs a multiple of "
     "--pipeline-model-parallel-size=2"},
    {SAMPLES "--pipeline-schedule ouroboros --rampup-batch-size 2 2 8", 1,
     "--pipeline-schedule=ouroboros: cannot be combined with --rampup-batch-size yet (issue 38)"},
    {"--lr-warmup-init 0.01", 1, "--lr-warmup-init=0.01: must be in [0, --lr=0.001]"},
    {"--weight-decay-incr-style exponential", 1,
     "--weight-decay-incr-style=exponential: must be constant, linear or cosine"},
    {"--start-weight-decay 0.1", 1,
     "--start-weight-decay=0.1: needs --weight-decay-incr-style linear or cosine (constant: --weight-decay)"},
    {"--weight-decay-incr-style linear --start-weight-decay 0.1", 1,
     "--end-weight-decay=(not given): must be >= 0: --weight-decay-incr-style linear needs both ends"},
    {"--pipeline-schedule ouroboros --weight-decay-incr-style cosine --start-weight-decay 0 --end-weight-decay 0.1", 1,
     "--pipeline-schedule=ouroboros: cannot be combined with --weight-decay-incr-style linear or cosine yet (issue 38)"},
};
#undef SAMPLES
INSTANTIATE_TEST_SUITE_P(SampleBased, TrainArgumentsRule, ::testing::ValuesIn(kSampleBasedRules));

// Megatron's flags for GPU implementations (fused kernels, Transformer Engine, NCCL, workers) are
// accepted, so that its scripts run, each recorded with what Tessera does instead; a value Megatron
// would refuse is refused.
TEST(TrainArguments, MegatronFlagsWithoutEffectHereAreAcceptedAndNamed) {
  const TrainArguments a = parse(
      "--use-flash-attn --no-masked-softmax-fusion --transformer-impl transformer_engine --distributed-backend nccl "
      "--num-workers 2 --ckpt-format torch_dist");
  const std::string note = megatron_compat_note(a.megatron_compat_flags);
  EXPECT_EQ(a.megatron_compat_flags.size(), 6u) << note;
  for (const char* line : {"--use-flash-attn (attention is always", "--no-masked-softmax-fusion (",
                           "--transformer-impl transformer_engine (", "--distributed-backend nccl (ranks talk through MPI",
                           "--num-workers 2 (", "--ckpt-format torch_dist (checkpoints are Tessera's"})
    EXPECT_NE(note.find(line), std::string::npos) << line << " not in " << note;
  EXPECT_EQ(megatron_compat_note(parse("").megatron_compat_flags), "");
  EXPECT_EQ(error_of(kBase + "--transformer-impl te"),
            "--transformer-impl=te: must be one of local transformer_engine (Megatron's; accepted, no effect here)");
  EXPECT_EQ(error_of(kBase + "--num-workers x"), "--num-workers=x: must be a count >= 0 (Megatron's; accepted, no effect here)");
  // --ckpt-format: Megatron's values now, each saying what it means here; the removed zarr refused by name.
  for (const char* format : {"torch", "torch_dist", "torch_dcp", "fsdp_dtensor"}) {
    const std::string n = megatron_compat_note(parse(str_cat("--ckpt-format ", format)).megatron_compat_flags);
    EXPECT_NE(n.find(str_cat("--ckpt-format ", format, " (checkpoints are Tessera's")), std::string::npos) << n;
    EXPECT_NE(n.find(str_cat("Megatron-LM's ", format, " checkpoints")), std::string::npos) << n;
  }
  EXPECT_EQ(error_of(kBase + "--ckpt-format zarr"),
            "--ckpt-format=zarr: Megatron-LM removed the zarr format (January 2026); its values now are torch, "
            "torch_dist, torch_dcp and fsdp_dtensor (Tessera writes its own format whichever is given)");
  EXPECT_NE(error_of(kBase + "--ckpt-format zarr3").find("must be one of torch torch_dist torch_dcp fsdp_dtensor"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "--use-flash-attention").find("unknown flag --use-flash-attention"), std::string::npos);  // not Megatron's
}

// A misspelled flag is named with the nearest known one, even when CLI11 would first miss a required flag.
TEST(TrainArguments, AnUnknownFlagIsNamedWithTheNearestKnownOne) {
  EXPECT_EQ(error_of(kBase + "--hidden-sise 8"),
            "unknown flag --hidden-sise (did you mean --hidden-size?) (tessera train --help lists the flags)");
  std::string without_lr = kBase;
  without_lr.replace(without_lr.find("--lr "), 4, "--lrr");
  EXPECT_EQ(error_of(without_lr), "unknown flag --lrr (did you mean --lr?) (tessera train --help lists the flags)");
}

// --train-samples sets the iterations as Megatron's update_train_iters and the schedule in samples: the
// decay over --lr-decay-samples (default: all), the warm-up a fraction of it unrounded.
TEST(TrainArguments, SampleBasedTrainingCountsIterationsAndSchedulesInSamples) {
  const TrainArguments constant = parse("--train-iters 0 --train-samples 10 --lr-warmup-samples 2");
  EXPECT_EQ(constant.train_iters, 2);  // 10 / 4, the partial batch dropped
  EXPECT_EQ(constant.lr_schedule.decay_steps, 10);
  EXPECT_EQ(constant.lr_schedule.warmup_steps, 2);
  const TrainArguments ramp = parse(
      "--train-iters 0 --micro-batch-size 1 --global-batch-size 8 --train-samples 30 --rampup-batch-size 2 2 12 "
      "--lr-decay-samples 25 --lr-warmup-fraction 0.1");
  EXPECT_EQ(ramp.train_iters, 6);  // 2, 2, 4, 6, then 8 and 8
  EXPECT_EQ(ramp.num_micro_batches, 8);
  EXPECT_EQ(ramp.batch_schedule.at(4), 4);
  EXPECT_EQ(ramp.lr_schedule.decay_steps, 25);
  EXPECT_DOUBLE_EQ(ramp.lr_schedule.warmup_steps, 2.5);
  // The weight decay's schedule runs over the same steps.
  const TrainArguments wd = parse(
      "--train-iters 0 --train-samples 16 --weight-decay-incr-style cosine --start-weight-decay 0.01 "
      "--end-weight-decay 0.1 --lr-warmup-init 1e-4");
  EXPECT_EQ(wd.weight_decay_schedule.incr_steps, 16);
  EXPECT_FLOAT_EQ(wd.weight_decay_schedule.start, 0.01f);
  EXPECT_FLOAT_EQ(wd.weight_decay_schedule.end, 0.1f);
  EXPECT_TRUE(wd.weight_decay_schedule.varies());
  EXPECT_FLOAT_EQ(wd.adam.weight_decay, 0.01f);
  EXPECT_FLOAT_EQ(wd.lr_schedule.init_lr, 1e-4f);
  EXPECT_FALSE(parse("--weight-decay 0.2").weight_decay_schedule.varies());
  // Iteration-based runs keep their schedule in iterations.
  const TrainArguments iterations = parse("--train-iters 10 --lr-warmup-iters 3");
  EXPECT_EQ(iterations.lr_schedule.decay_steps, 10);
  EXPECT_EQ(iterations.lr_schedule.warmup_steps, 3);
  EXPECT_FALSE(iterations.batch_schedule.ramps());
}

const RuleCase kOptimizerRules[] = {
    {"--lr 0", 1, "--lr=0: must be positive"},
    {"--min-lr 0.01", 1, "--min-lr=0.01: must be in [0, --lr=0.001]"},
    {"--weight-decay -1", 1, "--weight-decay=-1: must be >= 0"},
    {"--adam-beta1 1", 1, "--adam-beta1=1: must be in [0, 1)"},
    {"--adam-beta2 -0.5", 1, "--adam-beta2=-0.5: must be in [0, 1)"},
    {"--adam-eps 0", 1, "--adam-eps=0: must be positive"},
    {"--lr inf", 1, "--lr=inf: must be a finite number"},
    {"--weight-decay inf", 1, "--weight-decay=inf: must be a finite number"},
    {"--adam-eps inf", 1, "--adam-eps=inf: must be a finite number"},
    {"--clip-grad -1", 1, "--clip-grad=-1: must be >= 0"},
    {"--lr-decay-iters -1", 1, "--lr-decay-iters=-1: must be positive"},
    {"--lr-warmup-iters -1", 1, "--lr-warmup-iters=-1: must be >= 0"},
    {"--lr-warmup-fraction 0.5 --lr-warmup-iters 1", 1,
     "--lr-warmup-fraction=0.5: cannot be combined with --lr-warmup-iters"},
    {"--lr-warmup-fraction 2", 1, "--lr-warmup-fraction=2: must be in [0, 1]"},
    {"--lr-warmup-iters 1", 1, "--lr-warmup-iters=1: must be less than --lr-decay-iters=1"},
    {"--lr-decay-style exponential", 1, "--lr-decay-style: 'exponential' is not one of constant, linear, cosine"},
    {"--bf16 --fp16", 1, "--bf16=true: cannot be combined with --fp16"},
    {"--loss-scale 128", 1, "--loss-scale=128: needs --fp16 or --bf16"},
    {"--fp16 --loss-scale -1", 1, "--loss-scale=-1: must be >= 0 (0: dynamic)"},
    {"--fp16 --initial-loss-scale 0", 1, "--initial-loss-scale=0: must be positive"},
    {"--fp16 --initial-loss-scale 1024 --min-loss-scale 2048", 1,
     "--min-loss-scale=2048: must be in (0, --initial-loss-scale=1024]"},
    {"--fp16 --loss-scale-window 0", 1, "--loss-scale-window=0: must be positive"},
    {"--fp16 --hysteresis 0", 1, "--hysteresis=0: must be positive"},
};
INSTANTIATE_TEST_SUITE_P(Optimizer, TrainArgumentsRule, ::testing::ValuesIn(kOptimizerRules));

const RuleCase kCheckpointingRules[] = {
    {"--save-interval -1", 1, "--save-interval=-1: must be >= 0"},
    {"--save-interval 5", 1, "--save-interval=5: needs --save DIR"},
    {"--ckpt-keep-last -1", 1, "--ckpt-keep-last=-1: must be >= 0"},
    {"--exit-interval -1", 1, "--exit-interval=-1: must be >= 0 (0: never)"},
    {"--exit-duration-in-mins -2", 1, "--exit-duration-in-mins=-2: must be a finite number >= 0 (0: never)"},
};
INSTANTIATE_TEST_SUITE_P(Checkpointing, TrainArgumentsRule, ::testing::ValuesIn(kCheckpointingRules));

const RuleCase kOuroborosRules[] = {
    {"--pipeline-schedule gpipe", 1, "--pipeline-schedule=gpipe: must be 1f1b or ouroboros"},
    {"--ouroboros-warmup-iters 2", 1, "--ouroboros-warmup-iters=2: needs --pipeline-schedule ouroboros"},
    {"--ouroboros-modules 3", 1, "--ouroboros-modules=3: needs --pipeline-schedule ouroboros"},
    {"--pipeline-schedule ouroboros --ouroboros-warmup-iters -1", 1, "--ouroboros-warmup-iters=-1: must be >= 0"},
    {"--pipeline-schedule ouroboros --ouroboros-modules -1", 1, "--ouroboros-modules=-1: must be positive"},
    {"--pipeline-schedule ouroboros --ouroboros-modules 3", 1,
     "--num-layers=2: must be a multiple of the 3 Ouroboros modules"},
    {"--pipeline-schedule ouroboros --untie-embeddings-and-output-weights", 1,
     "--pipeline-schedule=ouroboros: needs the input embedding tied to the output layer (the first and last "
     "modules share it): drop --untie-embeddings-and-output-weights"},
    {"--pipeline-schedule ouroboros --pipeline-model-parallel-size 2 --ouroboros-modules 2", 2,
     "--ouroboros-modules=2: must be --pipeline-model-parallel-size + 1 = 3 (the first and last module share rank 0)"},
    {"--pipeline-schedule ouroboros --tensor-model-parallel-size 2 --sequence-parallel", 2,
     "--pipeline-schedule=ouroboros: cannot be combined with --sequence-parallel yet (issue 38)"},
    {"--pipeline-schedule ouroboros --context-parallel-size 2", 2,
     "--pipeline-schedule=ouroboros: cannot be combined with --context-parallel-size yet (issue 38)"},
    {"--pipeline-schedule ouroboros --use-distributed-optimizer", 2,
     "--pipeline-schedule=ouroboros: cannot be combined with --use-distributed-optimizer yet (issue 38)"},
    {"--pipeline-schedule ouroboros --bf16", 1, "--pipeline-schedule=ouroboros: cannot be combined with --bf16 yet (issue 38)"},
    {"--pipeline-schedule ouroboros --save /tmp/x --load /tmp/x --finetune", 1,
     "--pipeline-schedule=ouroboros: cannot be combined with --finetune or --no-load-optim (a resumed Ouroboros run "
     "loads its whole state: weight versions, delayed gradients, moments) yet (issue 38)"},
};
INSTANTIATE_TEST_SUITE_P(Ouroboros, TrainArgumentsRule, ::testing::ValuesIn(kOuroborosRules));

TEST(TrainArguments, OuroborosDefaultsToPipelineSizePlusOneModules) {
  TrainArguments a = parse("--pipeline-schedule ouroboros --ouroboros-warmup-iters 5");
  EXPECT_EQ(a.ouroboros_modules, 2);
  EXPECT_EQ(a.ouroboros_warmup_iters, 5);
  EXPECT_EQ(parse("").pipeline_schedule, "1f1b");
  // On P ranks: K = P + 1 (the MPI run, issue 38).
  EXPECT_EQ(parse("--pipeline-schedule ouroboros --pipeline-model-parallel-size 3 --num-layers 8 --eval-iters 0", 3)
                .ouroboros_modules, 4);
  // Data parallelism: the ring replicated, world = P x T x D.
  const TrainArguments dp = parse("--pipeline-schedule ouroboros --pipeline-model-parallel-size 2 --num-layers 6 "
                                  "--eval-iters 0 --tensor-model-parallel-size 2", 8);
  EXPECT_EQ(dp.ouroboros_modules, 3);
  EXPECT_EQ(dp.data_parallel_size(), 2);
  // Checkpoints hold the delayed state (train/ouroboros_checkpoint.cc).
  EXPECT_EQ(parse("--pipeline-schedule ouroboros --save /tmp/x --load /tmp/x --save-interval 2").save, "/tmp/x");
}

// Zero bubble (pipeline/zero_bubble.h): the fork's flags, ZB-V's two chunks per rank, what they refuse.
TEST(TrainArguments, ZeroBubbleSchedulesAndWhatTheyRefuse) {
  const std::string pp2 = "--pipeline-model-parallel-size 2 --num-layers 8 --eval-iters 0 --global-batch-size 6 ";
  const TrainArguments h1 = parse(pp2 + "--enable-zero-bubble --zero-bubble-max-pending-backward 2", 2);
  EXPECT_EQ(h1.zero_bubble, pipeline::ZeroBubble::H1);
  EXPECT_EQ(schedule_shape(h1, 3).max_pending_weight_passes, 2);
  const TrainArguments v = parse(pp2 + "--zero-bubble-v-schedule", 2);  // 3 micro-batches: no multiple of pp needed
  EXPECT_EQ(v.zero_bubble, pipeline::ZeroBubble::V);
  EXPECT_EQ(v.virtual_pipeline_size, 2);
  EXPECT_EQ(parse("").zero_bubble, pipeline::ZeroBubble::Off);
  EXPECT_EQ(error_of(kBase + pp2 + "--zero-bubble-v-schedule --num-layers 6", 2),
            "--zero-bubble-v-schedule: --num-layers=6 must be a multiple of 2 x --pipeline-model-parallel-size = 4 "
            "(an even number of layers per stage, half in each arm of the V)");
  EXPECT_EQ(error_of(kBase + "--zero-bubble-v-schedule"),
            "--zero-bubble-v-schedule needs --pipeline-model-parallel-size > 1");
  EXPECT_NE(error_of(kBase + pp2 + "--enable-zero-bubble --num-virtual-stages-per-pipeline-rank 2 --global-batch-size 8", 2)
                .find("--enable-zero-bubble cannot be combined with the interleaved schedule"),
            std::string::npos);
  EXPECT_EQ(error_of(kBase + pp2 + "--enable-zero-bubble --pipeline-schedule ouroboros", 2),
            "--enable-zero-bubble cannot be combined with --pipeline-schedule ouroboros");
  EXPECT_EQ(error_of(kBase + "--zero-bubble-max-pending-backward 2"),
            "--zero-bubble-max-pending-backward=2: needs --enable-zero-bubble or --zero-bubble-v-schedule");
  EXPECT_EQ(error_of(kBase + "--enable-zero-bubble --zero-bubble-max-pending-backward -1"),
            "--zero-bubble-max-pending-backward=-1: must not be negative (0: bounded by memory only)");
  // The timed iterations before the lists are rebuilt from measured costs (the fork's defaults: 100-110).
  EXPECT_EQ(h1.zero_bubble_timers_start_iter, 100);
  EXPECT_EQ(h1.zero_bubble_timers_end_iter, 110);
  EXPECT_EQ(error_of(kBase + pp2 + "--enable-zero-bubble --zero-bubble-pipeline-timers-start-iter 5 "
                                   "--zero-bubble-pipeline-timers-end-iter 5", 2),
            "--zero-bubble-pipeline-timers-end-iter=5: must be above --zero-bubble-pipeline-timers-start-iter=5");
  EXPECT_EQ(error_of(kBase + pp2 + "--enable-zero-bubble --zero-bubble-pipeline-timers-start-iter -1", 2),
            "--zero-bubble-pipeline-timers-start-iter=-1: must not be negative");
}

TEST(TrainArguments, DataPathOrMockDataIsRequired) {
  std::string without_data = kBase;
  without_data.replace(without_data.find("--mock-data "), 12, "");
  EXPECT_EQ(error_of(without_data),
            "--data-path=(none): give exactly one of --mock-data and --data-path (or --train-data-path, "
            "--valid-data-path, --test-data-path)");
}

// Megatron's --train-data-path, --valid-data-path, --test-data-path: each as --data-path (its last
// occurrence), instead of --data-path and --split; training needs the train path.
TEST(TrainArguments, PerSplitDataPaths) {
  std::string base = kBase;
  base.replace(base.find("--mock-data "), 12, "");
  const TrainArguments a = parse_train_arguments(
      split_flags(base + "--train-data-path a --valid-data-path 1 b 2 c --train-data-path x"), 1);
  EXPECT_EQ(a.split_data_path[0], (std::vector<std::string>{"x"}));
  EXPECT_EQ(a.split_data_path[1], (std::vector<std::string>{"1", "b", "2", "c"}));
  EXPECT_TRUE(a.split_data_path[2].empty());
  EXPECT_TRUE(a.data_path.empty());
  EXPECT_EQ(error_of(base + "--train-data-path a --split 1,1,1"),
            "--split=1,1,1: given with --train-data-path: --split does not apply to per-split paths: each split "
            "takes the whole of its datasets");
  EXPECT_EQ(error_of(base + "--valid-data-path b"),
            "--train-data-path=(none): training needs it (--valid-data-path is given; --skip-train only evaluates)");
  EXPECT_TRUE(parse_train_arguments(split_flags(base + "--valid-data-path b --skip-train"), 1).skip_train);
}

// As with Megatron's argparse (nargs='+'), a multi-valued flag given twice takes the values of its last
// occurrence, not both lists: a launch script can append an override of --data-path or --num-experts.
TEST(TrainArguments, AMultiValuedFlagGivenTwiceTakesItsLastValues) {
  std::string with_data = kBase;
  with_data.replace(with_data.find("--mock-data "), 12, "");
  const TrainArguments data = parse_train_arguments(
      split_flags(with_data + "--data-path 0.3 first 0.7 second --data-path third"), 1);
  EXPECT_EQ(data.data_path, (std::vector<std::string>{"third"}));
  const TrainArguments blend = parse_train_arguments(split_flags(with_data + "--data-path a --data-path 1 b 2 c"), 1);
  EXPECT_EQ(blend.data_path, (std::vector<std::string>{"1", "b", "2", "c"}));
  EXPECT_EQ(parse("--num-experts 8 --num-experts 4").model.moe.layer_experts, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(parse("--num-experts 4 --num-experts 2 4").model.moe.layer_experts, (std::vector<int64_t>{2, 4}));
  // Inline values and other flags between the occurrences.
  const auto data_path = [&](const std::string& extra) { return parse_train_arguments(split_flags(with_data + extra)).data_path; };
  using Values = std::vector<std::string>;
  EXPECT_EQ(data_path(" --data-path=a --lr 1e-3 --data-path 1 b 2 c"), (Values{"1", "b", "2", "c"}));
  EXPECT_EQ(data_path(" --data-path a b --data-path=c --lr 1e-3"), Values{"c"});
  EXPECT_EQ(data_path(" --data-path 0.5 a 0.5 b"), (Values{"0.5", "a", "0.5", "b"}));
  EXPECT_EQ(parse("--train-iters 0 --train-samples 16 --rampup-batch-size 1 1 4 --rampup-batch-size 2 2 8").rampup_batch_size,
            (std::vector<int64_t>{2, 2, 8}));
}

// Left out, the global batch is Megatron's default: one micro-batch on every data-parallel rank (not one
// micro-batch in all, which data parallelism then refused as "--global-batch-size=1: must be divisible").
TEST(TrainArguments, GlobalBatchDefaultsToOneMicroBatchPerDataParallelRank) {
  std::string flags = kBase;
  const std::string given = "--global-batch-size 4 ";
  ASSERT_NE(flags.find(given), std::string::npos);
  flags.erase(flags.find(given), given.size());
  auto global_batch = [&](const std::string& extra, int64_t world) {
    const TrainArguments a = parse_train_arguments(split_flags(flags + extra), world);
    EXPECT_EQ(a.num_micro_batches, 1) << extra << " at " << world << " ranks";
    return a.global_batch_size;
  };
  EXPECT_EQ(global_batch("", 1), 2);  // --micro-batch-size 2
  EXPECT_EQ(global_batch("", 4), 8);  // dp 4
  EXPECT_EQ(global_batch("--tensor-model-parallel-size 2", 4), 4);
  EXPECT_EQ(global_batch("--pipeline-model-parallel-size 2", 4), 4);
  EXPECT_EQ(global_batch("--context-parallel-size 2", 8), 8);  // dp = 8 / cp 2
}

TEST(TrainArguments, TheBaseRunIsValid) { EXPECT_EQ(error_of(kBase), "accepted"); }

// Megatron's RoPE scaling flags: Llama 3.x's with its default factor 8 and fixed bands, or linear.
TEST(TrainArguments, RopeScalingAndQkLayernormFlags) {
  model::ModelConfig c = parse("--position-embedding-type rope --use-rope-scaling --qk-layernorm").model;
  EXPECT_EQ(c.rope_scaling, model::RopeScaling::Llama3);
  EXPECT_EQ(c.rope_scaling_factor, 8.0);
  EXPECT_EQ(c.rope_low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_original_max_position, 8192);
  EXPECT_TRUE(c.qk_layernorm);
  c = parse("--position-embedding-type rope --use-rope-scaling --rope-scaling-factor 32").model;
  EXPECT_EQ(c.rope_scaling_factor, 32.0);
  c = parse("--position-embedding-type rope --rotary-seq-len-interpolation-factor 4").model;
  EXPECT_EQ(c.rope_scaling, model::RopeScaling::Linear);
  EXPECT_EQ(c.rope_scaling_factor, 4.0);
  c = parse("--position-embedding-type rope").model;
  EXPECT_EQ(c.rope_scaling, model::RopeScaling::None);
  EXPECT_FALSE(c.qk_layernorm);
}

// The model flags write the ModelConfig's fields; nothing else holds them.
TEST(TrainArguments, ModelFlagsWriteTheModelConfig) {
  const TrainArguments a = parse(
      "--position-embedding-type rope --normalization RMSNorm --rotary-base 500000 --rotary-percent 0.5 "
      "--norm-epsilon 1e-6 --hidden-dropout 0 --attention-dropout 0.25 --init-method-std 0.01 --swiglu "
      "--untie-embeddings-and-output-weights --disable-bias-linear --kv-channels 16 --ffn-hidden-size 96 "
      "--max-position-embeddings 64");
  const model::ModelConfig& c = a.model;
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.seq_length, 16);
  EXPECT_EQ(c.position_embedding, model::PositionEmbedding::Rope);
  EXPECT_EQ(c.normalization, model::Normalization::RMSNorm);
  EXPECT_EQ(c.rotary_base, 500000.0f);
  EXPECT_EQ(c.rotary_percent, 0.5f);
  EXPECT_EQ(c.norm_epsilon, 1e-6f);
  EXPECT_EQ(c.hidden_dropout, 0.0f);
  EXPECT_EQ(c.attention_dropout, 0.25f);
  EXPECT_EQ(c.init_method_std, 0.01f);
  EXPECT_TRUE(c.swiglu);
  EXPECT_TRUE(c.untie_embeddings_and_output_weights);
  EXPECT_FALSE(c.add_bias_linear);
  EXPECT_EQ(c.kv_channels, 16);
  EXPECT_EQ(c.ffn_hidden_size, 96);
  EXPECT_EQ(c.max_position_embeddings, 64);
}

// What a flag left at 0 (or out) becomes: Megatron's defaults.
TEST(TrainArguments, ModelDefaultsFollowMegatron) {
  TrainArguments a = parse("");
  EXPECT_EQ(a.model.kv_channels, 8);        // hidden / heads
  EXPECT_EQ(a.model.ffn_hidden_size, 128);  // 4h
  EXPECT_EQ(a.model.num_query_groups, 4);   // every head its own group
  EXPECT_EQ(a.model.max_position_embeddings, 16);
  EXPECT_EQ(a.model.position_embedding, model::PositionEmbedding::LearnedAbsolute);
  EXPECT_EQ(a.model.normalization, model::Normalization::LayerNorm);
  EXPECT_TRUE(a.model.add_bias_linear);
  EXPECT_EQ(a.model.params_dtype, DType::F32);
  EXPECT_EQ(parse("--swiglu").model.ffn_hidden_size, 64);  // 8h/3 rounded down to a multiple of 64
  EXPECT_EQ(parse("--group-query-attention").model.num_query_groups, 1);
  EXPECT_EQ(parse("--group-query-attention --num-query-groups 2").model.num_query_groups, 2);
  EXPECT_EQ(parse("--num-query-groups 2").model.num_query_groups, 4);  // ignored without grouped-query attention
  EXPECT_EQ(parse("--bf16").model.params_dtype, DType::BF16);
}

TEST(TrainArguments, VocabularyComesFromTheTokenizerPaddedForTensorParallelism) {
  const TrainArguments one = parse("");
  EXPECT_GE(one.model.vocab_size, 40);
  EXPECT_EQ(one.model.padded_vocab_size, 128);
  const TrainArguments two = parse("--tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64", 2);
  EXPECT_EQ(two.model.vocab_size, one.model.vocab_size);
  EXPECT_EQ(two.model.padded_vocab_size, 128);  // a multiple of 64 x 2
  EXPECT_EQ(parse("--make-vocab-size-divisible-by 8").model.padded_vocab_size,
            model::padded_vocab_size(one.model.vocab_size, 8, 1));
}

TEST(TrainArguments, EnumFlagsUseMegatronNames) {
  EXPECT_EQ(megatron_name(model::PositionEmbedding::LearnedAbsolute), "learned_absolute");
  EXPECT_EQ(megatron_name(model::PositionEmbedding::Rope), "rope");
  EXPECT_EQ(megatron_name(model::Normalization::LayerNorm), "LayerNorm");
  EXPECT_EQ(megatron_name(model::Normalization::RMSNorm), "RMSNorm");
  // The enum's number is not a name.
  EXPECT_EQ(error_of(kBase + "--normalization 1"), "--normalization=1: must be LayerNorm or RMSNorm");
  try {
    parse("--help");
    ADD_FAILURE() << "--help did not ask for help";
  } catch (const HelpRequested& help) {
    // The default is shown by name, not as the enum's number.
    EXPECT_NE(help.text.find("=learned_absolute"), std::string::npos) << help.text;
    EXPECT_NE(help.text.find("=LayerNorm"), std::string::npos) << help.text;
  }
}

}  // namespace
}  // namespace tessera::train

namespace tessera::train {
namespace {

// --pipeline-token-slices auto: TeraPipe's dynamic program over the cost the caller hands in (tessera
// train: the planner's), or the stated model; the lengths always cover the sequence.
TEST(TokenSlicesAuto, TheDynamicProgramChoosesFromTheGivenCost) {
  // No fixed cost per slice, work growing with the context: the program cuts the sequence.
  const pipeline::SliceCost cost = [](int64_t l, int64_t c) { return 1e-3 * l + 1e-5 * l * (c + l); };
  const TokenSliceCostModel model = [&](const TrainArguments&) { return TokenSliceCosts{cost, "a test's costs"}; };
  const std::string flags = kBase + "--seq-length 64 --pipeline-model-parallel-size 4 --num-layers 4 "
                                    "--pipeline-token-slices auto";
  const TrainArguments a = parse_train_arguments(split_flags(flags), 4, model);
  EXPECT_EQ(a.token_slices, pipeline::best_token_slicing(64, pipeline::kTokenSliceUnit, cost, a.num_micro_batches, 4));
  EXPECT_GT(a.token_slices.size(), 1u);
  int64_t sum = 0;
  for (int64_t l : a.token_slices) sum += l;
  EXPECT_EQ(sum, 64);
  EXPECT_EQ(a.token_slices_source, "a test's costs");

  const TrainArguments stated = parse("--pipeline-token-slices auto");
  int64_t stated_sum = 0;
  for (int64_t l : stated.token_slices) stated_sum += l;
  EXPECT_EQ(stated_sum, 16);
  EXPECT_FALSE(stated.token_slices_source.empty());
  EXPECT_NE(error_of(kBase + "--seq-length 20 --pipeline-token-slices auto").find("must be a multiple of 8"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::train
