// The trainer's device side on a GPU (tessera train --device cuda) that needs no model kernels: the flag
// accepted with the GPU's name and the device prepared; a micro-batch moved there whole; checkpoints
// saved from parameters and Adam moments on the GPU loading on the CPU bit for bit, and the reverse (ckpt/
// stages through the host, the format is the same). Skipped, with CUDA's reason, where no GPU is usable.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "ckpt/checkpoint.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/tensor_ops.h"
#include "model/parameters.h"
#include "optim/adamw_optimizer.h"
#include "train/args/arguments.h"
#include "train/device_setup.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

using cuda::testing::kGpu;
using cuda::testing::same_bits;

class CudaDeviceSetup : public cuda::testing::CudaKernelTest {};

Tensor on_host(const Tensor& t) { return kernels::to_device(t, Device::cpu()); }

// Parameters as a model declares them, made on `device` as the trainer makes them (a DefaultDeviceScope),
// after one AdamW step on random gradients, so that the moments are not zero.
struct Training {
  model::ParameterSet params;
  std::unique_ptr<optim::AdamWOptimizer> optimizer;
};
std::unique_ptr<Training> training_on(Device device, uint64_t seed) {
  auto t = std::make_unique<Training>();
  DefaultDeviceScope scope(device);
  t->params.add({"embedding.word_embeddings.weight", {64, 16}, model::Init::Normal, 0.02f});
  t->params.add({"decoder.layers.0.mlp.linear_fc1.weight", {32, 16}, model::Init::Normal, 0.02f});
  t->params.add({"decoder.final_layernorm.weight", {16}, model::Init::Ones});
  t->params.allocate(seed);
  t->optimizer = std::make_unique<optim::AdamWOptimizer>(t->params, optim::AdamWConfig{0.1f, 0.9f, 0.95f, 1e-8f, 1.0f});
  kernels::transfer(t->params.grads(), cuda::testing::random({t->params.numel()}, seed + 1));
  t->optimizer->step(1e-2f);
  return t;
}

std::string fresh_dir(const std::string& name) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() / ("tessera_" + name);
  std::filesystem::remove_all(p);
  return p.string();
}

void expect_same_state(const Training& got, const Training& want) {
  EXPECT_TRUE(same_bits(on_host(got.params.values()), on_host(want.params.values())));
  EXPECT_TRUE(same_bits(on_host(got.optimizer->exp_avg()), on_host(want.optimizer->exp_avg())));
  EXPECT_TRUE(same_bits(on_host(got.optimizer->exp_avg_sq()), on_host(want.optimizer->exp_avg_sq())));
  EXPECT_EQ(got.optimizer->steps(), want.optimizer->steps());
}

TEST_F(CudaDeviceSetup, ACheckpointSavedOnTheGpuLoadsOnTheCpu) {
  const std::string dir = fresh_dir("gpu_to_cpu");
  const std::unique_ptr<Training> gpu = training_on(kGpu, 7);
  ASSERT_EQ(gpu->params.values().device(), kGpu);
  ASSERT_EQ(gpu->optimizer->exp_avg().device(), kGpu);
  ckpt::save_checkpoint(dir, {1, 4, 0, 1234, {}, {}}, gpu->params, gpu->optimizer.get());
  const std::unique_ptr<Training> cpu = training_on(Device::cpu(), 99);  // other values, overwritten
  const ckpt::TrainingState state = ckpt::load_checkpoint(dir, cpu->params, cpu->optimizer.get());
  EXPECT_EQ(state.iteration, 1);
  expect_same_state(*cpu, *gpu);
  std::filesystem::remove_all(dir);
}

TEST_F(CudaDeviceSetup, ACheckpointSavedOnTheCpuLoadsOnTheGpu) {
  const std::string dir = fresh_dir("cpu_to_gpu");
  const std::unique_ptr<Training> cpu = training_on(Device::cpu(), 7);
  ckpt::save_checkpoint(dir, {1, 4, 0, 1234, {}, {}}, cpu->params, cpu->optimizer.get());
  const std::unique_ptr<Training> gpu = training_on(kGpu, 99);
  ckpt::load_checkpoint(dir, gpu->params, gpu->optimizer.get());
  EXPECT_EQ(gpu->params.values().device(), kGpu);
  expect_same_state(*gpu, *cpu);
  std::filesystem::remove_all(dir);
}

TEST_F(CudaDeviceSetup, AMicroBatchMovesToTheGpuWhole) {
  model::MicroBatch b;
  b.tokens = Tensor::empty({2, 8}, DType::I32, Device::cpu());
  b.labels = Tensor::empty({2, 8}, DType::I32, Device::cpu());
  b.doc_start = Tensor::zeros({2, 8}, DType::I32, Device::cpu());
  for (int i = 0; i < 16; ++i) b.tokens.i32()[i] = i, b.labels.i32()[i] = 100 + i;
  b.loss_mask = cuda::testing::random({2, 8}, 3);
  b.sample_offset = 5;
  const model::MicroBatch g = micro_batch_on(b, kGpu);
  for (const auto& [got, want] : {std::pair{&g.tokens, &b.tokens}, std::pair{&g.labels, &b.labels},
                                  std::pair{&g.loss_mask, &b.loss_mask}, std::pair{&g.doc_start, &b.doc_start}}) {
    EXPECT_EQ(got->device(), kGpu);
    EXPECT_TRUE(same_bits(on_host(*got), *want));
  }
  EXPECT_FALSE(g.positions.defined());
  EXPECT_EQ(g.sample_offset, 5);
}

TEST_F(CudaDeviceSetup, DeviceCudaIsAcceptedWithTheGpusNameAndPrepared) {
  const std::string flags =
      "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data "
      "--tokenizer-type NullTokenizer --vocab-size 40 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 "
      "--train-iters 1 ";
  const TrainArguments named = parse_train_arguments(testing::split_flags(flags + "--device cuda"));
  EXPECT_EQ(named.device, kGpu);
  EXPECT_EQ(device_line(named).rfind("device: cuda:0 (", 0), 0u) << device_line(named);
  EXPECT_EQ(parse_train_arguments(testing::split_flags(flags)).device, kGpu);  // chosen when left out
  prepare_device(kGpu);  // allocators, cuBLASLt, the current device
  EXPECT_NE(device_memory_summary(kGpu).find("cuda:0 allocator (MB): in use "), std::string::npos);
}

}  // namespace
}  // namespace tessera::train
