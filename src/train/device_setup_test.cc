// --device: its rules against a machine with a GPU and one without (fake probes, so every case runs
// here), what the GPU path refuses by name, the start-up line, and the per-micro-batch move, which on the
// CPU is the same tensors.
#include "train/device_setup.h"

#include <gtest/gtest.h>

#include <string>

#include "core/check.h"
#include "train/args/arguments.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

using testing::split_flags;

const std::string kBase = testing::kSmallRunFlags;

// Parsed as `tessera train` parses them, on the CPU (the fake probes below then decide the device).
TrainArguments parse(const std::string& extra, int64_t world = 1) {
  return parse_train_arguments(split_flags(kBase + "--device cpu " + extra), world);
}

std::string error_of(const std::string& extra, int64_t world = 1) {
  try {
    parse_train_arguments(split_flags(kBase + extra), world);
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

DeviceProbe one_gpu() { return {true, 1, "", {"NVIDIA H200"}}; }
DeviceProbe no_gpu() { return {true, 0, "no CUDA device: cudaErrorNoDevice: no CUDA-capable device is detected", {}}; }
DeviceProbe cpu_build() { return {false, 0, "this tessera was built without CUDA", {}}; }

// finalize_device with `flag` (empty: left out) on `probe`; the device's name or the error.
std::string choose(TrainArguments a, const std::string& flag, const DeviceProbe& probe) {
  a.device_flag = flag;
  try {
    finalize_device(a, probe);
  } catch (const Error& e) {
    return e.what();
  }
  return device_line(a);
}

TEST(Device, LeftOutItIsTheGpuWhereOneIsUsableElseTheCpuSayingWhy) {
  const TrainArguments a = parse("");
  EXPECT_EQ(choose(a, "", one_gpu()), "device: cuda:0 (NVIDIA H200)");
  EXPECT_EQ(choose(a, "", no_gpu()),
            "device: cpu (no CUDA device: cudaErrorNoDevice: no CUDA-capable device is detected)");
  EXPECT_EQ(choose(a, "", cpu_build()), "device: cpu (this tessera was built without CUDA)");
}

TEST(Device, LeftOutARunTheGpuPathDoesNotRunTrainsOnTheCpu) {
  TrainArguments multiple_choice = parse("");
  multiple_choice.model.family = "bert_multiple_choice";  // (tessera finetune's model)
  EXPECT_EQ(choose(multiple_choice, "", one_gpu()),
            "device: cpu (cuda:0 is present, but the GPU path does not run --model-family=bert_multiple_choice (GPT "
            "and BERT models only) yet)");
  EXPECT_EQ(choose(parse("", 2), "", one_gpu()),
            str_cat("device: cpu (cuda:0 is present, but the GPU path runs data parallelism over 2 ranks only "
                    "unverified (no device run has compared it with the CPU yet: scripts/gpu_layouts_check.sh); set "
                    "TESSERA_UNVERIFIED_GPU_LAYOUTS=1 to run it anyway)"));
}

TEST(Device, NamedItIsThatDeviceOrAnErrorWithCudasReason) {
  const TrainArguments a = parse("");
  EXPECT_EQ(choose(a, "cpu", one_gpu()), "device: cpu (--device cpu)");
  EXPECT_EQ(choose(a, "cuda", one_gpu()), "device: cuda:0 (NVIDIA H200, --device cuda)");
  EXPECT_EQ(choose(a, "cuda:0", one_gpu()), "device: cuda:0 (NVIDIA H200, --device cuda:0)");
  EXPECT_EQ(choose(a, "cuda:1", one_gpu()), "--device=cuda:1: this machine has 1 CUDA device (cuda:0)");
  EXPECT_EQ(choose(a, "cuda", no_gpu()),
            "--device=cuda: no usable GPU: no CUDA device: cudaErrorNoDevice: no CUDA-capable device is detected");
  EXPECT_EQ(choose(a, "cuda", cpu_build()), "--device=cuda: no usable GPU: this tessera was built without CUDA");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CUDA", "cuda:123456"})
    EXPECT_EQ(choose(a, bad, one_gpu()), str_cat("--device=", bad, ": must be cpu, cuda or cuda:N")) << bad;
}

// Each setting the GPU path does not run yet, with --device cuda on a machine with a GPU: the message
// names the flag (and the answer is the same on a machine without one).
TEST(Device, TheGpuPathRefusesByNameWhatItDoesNotRunYet) {
  const std::string tail = " yet; leave --device out or use --device cpu";
  auto refused = [&](TrainArguments a, const std::string& what) {
    EXPECT_EQ(choose(a, "cuda", one_gpu()), str_cat("--device=cuda: the GPU path does not run ", what, tail));
    EXPECT_EQ(choose(a, "cuda", no_gpu()), str_cat("--device=cuda: the GPU path does not run ", what, tail));
  };
  TrainArguments a = parse("");
  a.model.family = "bert_multiple_choice";  // any family but GPT and BERT
  refused(a, "--model-family=bert_multiple_choice (GPT and BERT models only)");
  a = parse("");
  a = parse("");
  a.kd = true;  // (parsing --kd reads a teacher checkpoint)
  refused(a, "knowledge distillation (--kd)");
  refused(parse("--sample-interval 1 --sample-prompt hi"),
          "--sample-interval=1 (generation on the GPU comes later)");
  // Even with the opt-in below.
  DeviceProbe opted_in = one_gpu();
  opted_in.unverified_layouts = true;
  a = parse("", 2);
  a.kd = true;
  EXPECT_EQ(choose(a, "cuda", opted_in), "--device=cuda: the GPU path does not run knowledge distillation (--kd) "
                                         "yet; leave --device out or use --device cpu");
}

// --pipeline-schedule ouroboros (issue 56 item 3): its driver is device-clean (modules, weight versions,
// delayed gradients and moments on the GPU, ordered sums by kernels), but no GPU has run it yet, so it
// runs only with the layouts' opt-in, in one process (the emulation) as on a ring of pipeline ranks; the
// message names the schedule before the pipeline size it implies.
TEST(Device, OuroborosRunsOnGpusOnlyWhenOptedInAsUnverified) {
  const std::string unverified =
      "--device=cuda: the GPU path runs --pipeline-schedule=ouroboros only unverified (no device run has compared "
      "it with the CPU yet: scripts/gpu_layouts_check.sh); set TESSERA_UNVERIFIED_GPU_LAYOUTS=1 to run it anyway; "
      "leave --device out or use --device cpu";
  DeviceProbe opted_in = one_gpu();
  opted_in.unverified_layouts = true;
  const TrainArguments one = parse("--pipeline-schedule ouroboros --ouroboros-warmup-iters 1");
  EXPECT_EQ(choose(one, "cuda", one_gpu()), unverified);
  EXPECT_EQ(choose(one, "cuda", opted_in), "device: cuda:0 (NVIDIA H200, --device cuda)");
  // Left out without the opt-in: the CPU, saying why.
  EXPECT_EQ(choose(one, "", one_gpu()),
            "device: cpu (cuda:0 is present, but the GPU path runs --pipeline-schedule=ouroboros only unverified (no "
            "device run has compared it with the CPU yet: scripts/gpu_layouts_check.sh); set "
            "TESSERA_UNVERIFIED_GPU_LAYOUTS=1 to run it anyway)");
  // K = 3 modules on 2 pipeline ranks sharing the GPU.
  opted_in.local = {1, 2, "OMPI_COMM_WORLD_LOCAL_RANK"};
  const TrainArguments ring =
      parse("--pipeline-schedule ouroboros --pipeline-model-parallel-size 2 --num-layers 3", 2);
  EXPECT_EQ(choose(ring, "cuda", one_gpu()), unverified);
  EXPECT_EQ(choose(ring, "cuda", opted_in), "device: cuda:0 (NVIDIA H200, --device cuda, local rank 1 of 2 "
                                            "(OMPI_COMM_WORLD_LOCAL_RANK), 1 visible GPU, shared by 2 ranks)");
  // What Ouroboros itself does not run is still refused by its own rules, on any device.
  EXPECT_EQ(error_of("--device cpu --pipeline-schedule ouroboros --bf16"),
            "--pipeline-schedule=ouroboros: cannot be combined with --bf16 yet (issue 38)");
}

// The layouts issue 56 brings to the GPU (device-clean, not yet run on one): refused, saying how to opt
// in and that the run is unverified; with TESSERA_UNVERIFIED_GPU_LAYOUTS=1 they run, each rank on the GPU
// of its local rank.
TEST(Device, TheParallelLayoutsRunOnGpusOnlyWhenOptedInAsUnverified) {
  auto unverified = [](const std::string& what) {
    return str_cat("--device=cuda: the GPU path runs ", what, " only unverified (no device run has compared it "
                   "with the CPU yet: scripts/gpu_layouts_check.sh); set TESSERA_UNVERIFIED_GPU_LAYOUTS=1 to run it "
                   "anyway; leave --device out or use --device cpu");
  };
  DeviceProbe opted_in = one_gpu();
  opted_in.unverified_layouts = true;
  opted_in.local = {1, 2, "OMPI_COMM_WORLD_LOCAL_RANK"};
  const std::string shared = "device: cuda:0 (NVIDIA H200, --device cuda, local rank 1 of 2 "
                             "(OMPI_COMM_WORLD_LOCAL_RANK), 1 visible GPU, shared by 2 ranks)";
  TrainArguments a = parse("", 2);
  a.tensor_model_parallel_size = 2;
  a.sequence_parallel = true;
  EXPECT_EQ(choose(a, "cuda", one_gpu()), unverified("--tensor-model-parallel-size=2"));
  EXPECT_EQ(choose(a, "cuda", opted_in), shared);
  a = parse("", 2);
  a.pipeline_model_parallel_size = 2;
  EXPECT_EQ(choose(a, "cuda", one_gpu()), unverified("--pipeline-model-parallel-size=2"));
  EXPECT_EQ(choose(a, "cuda", opted_in), shared);
  a = parse("", 2);
  a.context_parallel_size = 2;
  EXPECT_EQ(choose(a, "cuda", one_gpu()), unverified("--context-parallel-size=2"));
  EXPECT_EQ(choose(a, "cuda", opted_in), shared);
  a = parse("--num-experts 4", 2);
  a.expert_model_parallel_size = 2;
  EXPECT_EQ(choose(a, "cuda", one_gpu()), unverified("--expert-model-parallel-size=2"));
  EXPECT_EQ(choose(a, "cuda", opted_in), shared);
  a = parse("--use-distributed-optimizer", 2);
  EXPECT_EQ(choose(a, "cuda", one_gpu()), unverified("--use-distributed-optimizer"));
  EXPECT_EQ(choose(a, "cuda", opted_in), shared);
  EXPECT_EQ(choose(parse("", 2), "cuda", one_gpu()), unverified("data parallelism over 2 ranks"));
  EXPECT_EQ(choose(parse("", 2), "cuda", opted_in), shared);
  // Left out, opted in: the GPU too; --device cuda:N names the GPU every rank of the node shares.
  EXPECT_EQ(choose(parse("", 2), "", opted_in),
            "device: cuda:0 (NVIDIA H200, local rank 1 of 2 (OMPI_COMM_WORLD_LOCAL_RANK), 1 visible GPU, shared by 2 "
            "ranks)");
  EXPECT_EQ(choose(parse("", 2), "cuda:0", opted_in), "device: cuda:0 (NVIDIA H200, --device cuda:0, shared by 2 ranks)");
  // A rank per GPU on a node of 4: local rank 1 on cuda:1, alone.
  DeviceProbe four = {true, 4, "", {"H100 0", "H100 1", "H100 2", "H100 3"}};
  four.unverified_layouts = true;
  four.local = {1, 4, "SLURM_LOCALID"};
  TrainArguments b = parse("--global-batch-size 8", 4);
  EXPECT_EQ(choose(b, "cuda", four), "device: cuda:1 (H100 1, --device cuda, local rank 1 of 4 (SLURM_LOCALID), 4 "
                                     "visible GPUs)");
  b.device_flag = "cuda";
  finalize_device(b, four);
  EXPECT_EQ(b.gpu_ranks_sharing, 1);
}

// TeraPipe's token slices (issue 56): device-clean, not yet run on a GPU, so behind the opt-in even on one
// stage, and named before the pipeline (the slices' attention at an offset is what is unverified).
TEST(Device, TokenSlicesRunOnAGpuOnlyWhenOptedInAsUnverified) {
  const std::string unverified = "the GPU path runs --pipeline-token-slices=2 only unverified (no device run has "
                                 "compared it with the CPU yet: scripts/gpu_layouts_check.sh); set "
                                 "TESSERA_UNVERIFIED_GPU_LAYOUTS=1 to run it anyway";
  DeviceProbe opted_in = one_gpu();
  opted_in.unverified_layouts = true;
  TrainArguments a = parse("--pipeline-token-slices 2");
  EXPECT_EQ(choose(a, "cuda", one_gpu()),
            str_cat("--device=cuda: ", unverified, "; leave --device out or use --device cpu"));
  EXPECT_EQ(choose(a, "", one_gpu()), str_cat("device: cpu (cuda:0 is present, but ", unverified, ")"));
  EXPECT_EQ(choose(a, "cuda", opted_in), "device: cuda:0 (NVIDIA H200, --device cuda)");
  EXPECT_EQ(choose(a, "", opted_in), "device: cuda:0 (NVIDIA H200)");
  // Slice lengths at pipeline size 2 (two ranks sharing the GPU when opted in).
  a = parse("--pipeline-model-parallel-size 2 --pipeline-token-slices 4,12", 2);
  EXPECT_EQ(a.token_slices, (std::vector<int64_t>{4, 12}));
  EXPECT_NE(choose(a, "cuda", one_gpu()).find("runs --pipeline-token-slices=4,12 only unverified"), std::string::npos);
  opted_in.local = {1, 2, "OMPI_COMM_WORLD_LOCAL_RANK"};
  EXPECT_EQ(choose(a, "cuda", opted_in), "device: cuda:0 (NVIDIA H200, --device cuda, local rank 1 of 2 "
                                         "(OMPI_COMM_WORLD_LOCAL_RANK), 1 visible GPU, shared by 2 ranks)");
  // What the CPU refuses with token slices stays refused, whatever the device.
  EXPECT_NE(error_of("--device cpu --pipeline-token-slices 2 --reset-attention-mask").find("--pipeline-token-slices"),
            std::string::npos);
}

TEST(Device, DeviceCollectivesIsAutoStagedOrNccl) {
  for (const char* v : {"auto", "staged", "nccl"})
    EXPECT_EQ(parse(str_cat("--device-collectives ", v)).device_collectives, v);
  EXPECT_EQ(parse("").device_collectives, "auto");
  EXPECT_EQ(error_of("--device cpu --device-collectives mpi"), "--device-collectives=mpi: must be auto, staged or nccl");
}

// What it runs: GPT-2 and Llama styles, fp32, bf16 and fp16 (the loss scaler reads only the step's
// result on the host), recomputation, checkpoints.
TEST(Device, TheGpuPathRunsDenseGptsInEveryPrecisionWithRecomputationAndCheckpoints) {
  for (const char* flags :
       {"", "--bf16", "--fp16", "--normalization RMSNorm --swiglu --position-embedding-type rope",
        "--recompute-granularity full --recompute-method uniform", "--recompute-activations",
        "--save /tmp/x --load /tmp/x --save-interval 1", "--num-experts 0"})
    EXPECT_EQ(choose(parse(flags), "cuda", one_gpu()), "device: cuda:0 (NVIDIA H200, --device cuda)") << flags;
}

// Multi-latent attention (with YaRN's RoPE and its mscale), multi-token prediction and mixture of experts
// on one GPU (issues 53/50/56), on a machine with a GPU; several ranks are the unverified layouts' opt-in,
// as for a dense GPT.
TEST(Device, TheGpuPathRunsMultiLatentAttentionAndMultiTokenPredictionOnOneGpu) {
  const std::string mla = "--multi-latent-attention --q-lora-rank 16 --kv-lora-rank 8 --qk-head-dim 8 "
                          "--qk-pos-emb-head-dim 4 --v-head-dim 8 --rope-type yarn --rotary-scaling-factor 4 "
                          "--mscale 1 --mscale-all-dim 1 ";
  for (const std::string& flags : {mla, std::string("--mtp-num-layers 2"), mla + "--mtp-num-layers 1 --bf16"})
    EXPECT_EQ(choose(parse(flags), "cuda", one_gpu()), "device: cuda:0 (NVIDIA H200, --device cuda)") << flags;
  EXPECT_EQ(choose(parse(mla + "--mtp-num-layers 1"), "", one_gpu()), "device: cuda:0 (NVIDIA H200)");
  EXPECT_EQ(choose(parse(mla + "--mtp-num-layers 1 --num-experts 4"), "cuda", one_gpu()),
            "device: cuda:0 (NVIDIA H200, --device cuda)");
  DeviceProbe opted_in = one_gpu();
  opted_in.unverified_layouts = true;
  const TrainArguments two = parse(mla + "--mtp-num-layers 1", 2);
  EXPECT_EQ(choose(two, "cuda", one_gpu()).rfind("--device=cuda: the GPU path runs data parallelism over 2 ranks "
                                                 "only unverified", 0), 0u);
  EXPECT_EQ(choose(two, "cuda:0", opted_in), "device: cuda:0 (NVIDIA H200, --device cuda:0)");
}

// Through parse_train_arguments, on this machine: refusals first, then what CUDA says here.
// Mixture of experts on one GPU (issues 53/56): the router's score functions, expert bias, group-limited
// routing, the load-balancing and z-losses, token dropping, the grouped GEMM and a shared expert; left out,
// the GPU is chosen for it as for a dense GPT.
TEST(Device, TheGpuPathRunsMixtureOfExpertsOnOneGpu) {
  for (const char* flags :
       {"--num-experts 4", "--num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001",
        "--num-experts 8 --moe-router-topk 2 --moe-router-score-function sigmoid --moe-router-enable-expert-bias "
        "--moe-router-num-groups 4 --moe-router-group-topk 2 --moe-shared-expert-intermediate-size 32",
        "--num-experts 4 --moe-grouped-gemm --moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity",
        "--num-experts 4 --moe-router-load-balancing-type seq_aux_loss --moe-input-jitter-eps 0.1 --bf16"})
    EXPECT_EQ(choose(parse(flags), "cuda", one_gpu()), "device: cuda:0 (NVIDIA H200, --device cuda)") << flags;
  EXPECT_EQ(choose(parse("--num-experts 4"), "", one_gpu()), "device: cuda:0 (NVIDIA H200)");
}

// BERT on one GPU (issues 50/56): both layer orderings, with and without the binary head, fp32 and bf16,
// recomputed; left out, the GPU is chosen for it as for a GPT. Several ranks are the unverified layouts'
// opt-in, as for a GPT (tensor and pipeline parallelism named first).
TEST(Device, TheGpuPathRunsBertOnOneGpu) {
  for (const char* flags : {"--model-family bert", "--model-family bert --bert-no-binary-head",
                            "--model-family bert --apply-residual-connection-post-layernorm --bf16",
                            "--model-family bert --recompute-granularity full --recompute-method uniform"})
    EXPECT_EQ(choose(parse(flags), "cuda", one_gpu()), "device: cuda:0 (NVIDIA H200, --device cuda)") << flags;
  EXPECT_EQ(choose(parse("--model-family bert"), "", one_gpu()), "device: cuda:0 (NVIDIA H200)");
  DeviceProbe opted_in = one_gpu();
  opted_in.unverified_layouts = true;
  TrainArguments two = parse("--model-family bert", 2);
  EXPECT_EQ(choose(two, "cuda", one_gpu()).rfind("--device=cuda: the GPU path runs data parallelism over 2 ranks "
                                                 "only unverified", 0), 0u);
  EXPECT_EQ(choose(two, "cuda:0", opted_in), "device: cuda:0 (NVIDIA H200, --device cuda:0)");
  two.tensor_model_parallel_size = 2;
  EXPECT_EQ(choose(two, "cuda", one_gpu()).rfind("--device=cuda: the GPU path runs --tensor-model-parallel-size=2 "
                                                 "only unverified", 0), 0u);
}

TEST(Device, ParsedHereTheFlagIsCheckedBeforeAnyWork) {
  EXPECT_EQ(error_of("--device tpu"), "--device=tpu: must be cpu, cuda or cuda:N");
  EXPECT_EQ(error_of("--device cuda --sample-interval 1 --sample-prompt hi"),
            "--device=cuda: the GPU path does not run --sample-interval=1 (generation on the GPU comes later) yet; "
            "leave --device out or use --device cpu");
  EXPECT_EQ(error_of("--device cuda", 2).rfind("--device=cuda: the GPU path runs data parallelism over 2 ranks only "
                                               "unverified", 0), 0u);
  EXPECT_EQ(parse_train_arguments(split_flags(kBase + "--device cpu")).device, Device::cpu());
  // Left out on several ranks: the CPU, whatever this machine has.
  EXPECT_EQ(parse_train_arguments(split_flags(kBase), 2).device, Device::cpu());
  const DeviceProbe here = probe_devices();
  if (here.cuda_devices > 0) GTEST_SKIP() << "a GPU is usable here: --device cuda is accepted";
  EXPECT_EQ(error_of("--device cuda"), str_cat("--device=cuda: no usable GPU: ", here.why_none));
  const TrainArguments a = parse_train_arguments(split_flags(kBase));
  EXPECT_EQ(a.device, Device::cpu());
  EXPECT_EQ(device_line(a), str_cat("device: cpu (", here.why_none, ")"));
}

// The per-micro-batch move runs on the CPU path too: there it hands over the very tensors.
TEST(Device, AMicroBatchOnTheCpuIsTheSameTensors) {
  model::MicroBatch b;
  b.tokens = Tensor::zeros({2, 4}, DType::I32, Device::cpu());
  b.labels = Tensor::zeros({2, 4}, DType::I32, Device::cpu());
  b.loss_mask = Tensor::zeros({2, 4}, DType::F32, Device::cpu());
  b.doc_start = Tensor::zeros({2, 4}, DType::I32, Device::cpu());
  b.sample_offset = 42;
  const model::MicroBatch on = micro_batch_on(b, Device::cpu());
  EXPECT_EQ(on.tokens.raw(), b.tokens.raw());
  EXPECT_EQ(on.labels.raw(), b.labels.raw());
  EXPECT_EQ(on.loss_mask.raw(), b.loss_mask.raw());
  EXPECT_EQ(on.doc_start.raw(), b.doc_start.raw());
  EXPECT_FALSE(on.positions.defined());
  EXPECT_FALSE(on.token_types.defined());
  EXPECT_EQ(on.sample_offset, 42);
  EXPECT_EQ(device_memory_summary(Device::cpu()), "");
  prepare_device(Device::cpu());  // nothing to prepare
}

// With the vocabulary, the ids are checked on the host before the move (a GPU model then does not copy
// them back to check them): an id outside it is the model's error, naming the tensor and the id; a batch
// inside it is marked as checked against that vocabulary, and none is without it.
TEST(Device, AMicroBatchsIdsAreCheckedOnTheHostBeforeTheMove) {
  model::MicroBatch b;
  b.tokens = Tensor::zeros({2, 4}, DType::I32, Device::cpu());
  b.labels = Tensor::zeros({2, 4}, DType::I32, Device::cpu());
  b.tokens.host_i32()[5] = 99;
  b.labels.host_i32()[6] = 99;
  EXPECT_EQ(micro_batch_on(b, Device::cpu(), 100).ids_checked_below, 100);
  EXPECT_EQ(micro_batch_on(b, Device::cpu()).ids_checked_below, 0);
  auto error = [&](int64_t vocab) {
    try {
      micro_batch_on(b, Device::cpu(), vocab);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error(99).find("token id 99 is outside the vocabulary [0, 99)"), std::string::npos) << error(99);
  b.tokens.host_i32()[5] = 0;
  EXPECT_NE(error(99).find("label id 99 is outside the vocabulary [0, 99)"), std::string::npos) << error(99);
  b.labels.host_i32()[6] = -1;
  EXPECT_NE(error(99).find("label id -1 is outside the vocabulary [0, 99)"), std::string::npos) << error(99);
}

}  // namespace
}  // namespace tessera::train
