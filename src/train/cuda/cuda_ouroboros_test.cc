// --pipeline-schedule ouroboros on a GPU (issue 56 item 3) against the same run on the CPU: the driver's
// modules, weight versions, delayed gradients, the tied embedding's fresh + stale terms (and the tied
// position embedding's, with multi-token prediction over learned positions) and every AdamW moment on the
// GPU, the ordered sums of the emulated data-parallel shares done by kernels; and the Ouroboros state in
// checkpoints staged through the host, so that a GPU save resumes on the CPU and the reverse. One process
// (the emulation of K modules); the ring on two processes sharing a GPU is scripts/gpu_layouts_check.sh's
// `pp2 ouroboros` row. Skipped, with CUDA's reason, where no GPU is usable.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/cuda/device_testing.h"
#include "model/model_testing.h"
#include "train/args/arguments.h"
#include "train/device_setup.h"
#include "train/ouroboros_driver.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

using cuda::testing::kGpu;

class CudaOuroboros : public cuda::testing::CudaKernelTest {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (!IsSkipped()) prepare_device(kGpu);
  }
};

constexpr int kMicroBatches = 4, kBatch = 2;
constexpr float kLr = 3e-3f;
constexpr int64_t kIterations = 6;

// A tiny GPT-2 style model (learned positions, dropout on); with `mtp`, one multi-token prediction module
// on module K-1, which then holds a copy of the position embedding tied to module 0's.
model::ModelConfig config(int64_t layers, bool mtp) {
  model::ModelConfig c = model::testing::tiny_gpt_config(/*llama_style=*/false, layers, /*seq=*/8, 8);
  c.hidden_size = 32;
  c.kv_channels = 8;
  if (mtp) {
    c.mtp_num_layers = 1;
    c.mtp_loss_scaling_factor = 0.3f;
  }
  return c;
}

std::vector<model::MicroBatch> mini_batch(const model::ModelConfig& c, int64_t t) {
  std::vector<model::MicroBatch> out;
  for (int m = 0; m < kMicroBatches; ++m) {
    out.push_back(model::testing::random_batch(c, kBatch, 100 * t + m));  // host tensors: the driver moves them
    out.back().sample_offset = (t * kMicroBatches + m) * kBatch;
  }
  return out;
}

double tokens_of(const std::vector<model::MicroBatch>& batches) {
  double tokens = 0;
  for (const model::MicroBatch& mb : batches)
    for (int64_t i = 0; i < mb.loss_mask.numel(); ++i) tokens += mb.loss_mask.f32()[i];
  return tokens;
}

struct DriverRun {
  std::vector<double> losses, norms;
  std::vector<Tensor> weights;  // per module, on the host
  std::vector<Tensor> tied;     // the last step's tied gradients (V, then P), on the host
  Device device;
};

DriverRun run_driver(const model::ModelConfig& c, Device device, int shares) {
  OuroborosOptions o;
  o.modules = 3;
  o.warmup_iters = 1;
  o.adam.clip_grad = 0.05f;  // below the norm: clipping active
  o.data_shares = shares;
  o.device = device;
  OuroborosDriver d(c, o);
  DriverRun r;
  r.device = d.parameters(0).values().device();
  for (int64_t t = 0; t < kIterations; ++t) {
    const std::vector<model::MicroBatch> batches = mini_batch(c, t);
    r.losses.push_back(d.step(batches, tokens_of(batches), kLr));
    r.norms.push_back(d.last_grad_norm());
  }
  for (int k = 0; k < d.modules(); ++k) r.weights.push_back(kernels::to_device(d.parameters(k).values(), Device::cpu()));
  for (const std::string& name : d.tied_names())
    r.tied.push_back(kernels::to_device(d.tied_gradient(name), Device::cpu()));
  return r;
}

void expect_same_driver_run(const DriverRun& gpu, const DriverRun& cpu) {
  EXPECT_EQ(gpu.device, kGpu);
  EXPECT_EQ(cpu.device, Device::cpu());
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t t = 0; t < cpu.losses.size(); ++t) {
    EXPECT_NEAR(gpu.losses[t], cpu.losses[t], 1e-4 * std::fabs(cpu.losses[t])) << "iteration " << t;
    EXPECT_NEAR(gpu.norms[t], cpu.norms[t], 1e-3 * cpu.norms[t]) << "iteration " << t;
  }
  // The weights and the last tied gradients within what fp32 reordering leaves after a few AdamW steps
  // (a unit not updated, or V's copy in module K-1 left behind, differs by the learning rate's steps).
  ASSERT_EQ(gpu.weights.size(), cpu.weights.size());
  for (size_t k = 0; k < cpu.weights.size(); ++k)
    EXPECT_TRUE(cuda::testing::all_close(gpu.weights[k], cpu.weights[k], 1e-2f, 1e-3f)) << "module " << k;
  ASSERT_EQ(gpu.tied.size(), cpu.tied.size());
  for (size_t u = 0; u < cpu.tied.size(); ++u)
    EXPECT_TRUE(cuda::testing::all_close(gpu.tied[u], cpu.tied[u], 1e-2f, 1e-4f)) << "tied unit " << u;
  EXPECT_LT(cpu.losses.back(), cpu.losses.front());  // it learns
}

// K = 3 modules, one synchronous iteration then delays: every loss, norm, module's weights and the tied
// embedding's last gradient (the output layer's fresh term + the input embedding's stale one).
TEST_F(CudaOuroboros, TheDelayedRuleTrainsAsOnTheCpu) {
  const model::ModelConfig c = config(3, false);
  expect_same_driver_run(run_driver(c, kGpu, 1), run_driver(c, Device::cpu(), 1));
}

// Two emulated data-parallel shares (the replicas' gradients added in share order by kernels), and
// multi-token prediction over learned positions (P tied as V is: two tied units with their own moments).
TEST_F(CudaOuroboros, EmulatedSharesAndTiedPositionsTrainAsOnTheCpu) {
  const model::ModelConfig c = config(3, true);
  const DriverRun gpu = run_driver(c, kGpu, 2), cpu = run_driver(c, Device::cpu(), 2);
  EXPECT_EQ(cpu.tied.size(), 2u);  // V and P
  expect_same_driver_run(gpu, cpu);
}

// Through the Trainer, as `tessera train` runs it: the opt-in, the losses of every iteration, and the
// Ouroboros state of a checkpoint (weight versions, waiting error gradients, moments) across devices.
const std::string kRun =
    "--num-layers 3 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --mock-data "
    "--tokenizer-type NullTokenizer --vocab-size 96 --micro-batch-size 2 --global-batch-size 4 --lr 1e-2 "
    "--lr-warmup-iters 2 --log-interval 4 --eval-interval 8 --eval-iters 1 --pipeline-schedule ouroboros "
    "--ouroboros-modules 3 --ouroboros-warmup-iters 1 ";

std::vector<double> train_on(const std::string& device, const std::string& flags) {
  setenv("TESSERA_UNVERIFIED_GPU_LAYOUTS", "1", 1);  // what the GPU path asks of Ouroboros until a device run
  Trainer t(parse_train_arguments(testing::split_flags(flags + " --device " + device)));
  EXPECT_EQ(t.parameters().values().device(), device == "cpu" ? Device::cpu() : kGpu);
  t.train();
  return t.losses();
}

void expect_close_losses(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * std::fabs(want[i])) << "iteration " << i + 1;
}

TEST_F(CudaOuroboros, TesseraTrainWithOuroborosOnTheGpuLogsTheCpusLosses) {
  expect_close_losses(train_on("cuda", kRun + "--train-iters 8"), train_on("cpu", kRun + "--train-iters 8"));
}

TEST_F(CudaOuroboros, AnOuroborosCheckpointMovesBetweenTheGpuAndTheCpu) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "tessera_cuda_ouroboros_ckpt";
  std::filesystem::remove_all(dir);
  const std::string cpu_dir = (dir / "cpu").string(), gpu_dir = (dir / "gpu").string();
  // Saved at iteration 4, with weight versions and error gradients pending (delays 2 and 1).
  train_on("cuda", kRun + "--train-iters 4 --save " + gpu_dir);
  train_on("cpu", kRun + "--train-iters 4 --save " + cpu_dir);
  const std::vector<double> reference = train_on("cpu", kRun + "--train-iters 8 --load " + cpu_dir);
  ASSERT_EQ(reference.size(), 4u);
  // The GPU's save resumed on the CPU, and the CPU's on the GPU: the CPU's resumed run up to rounding.
  expect_close_losses(train_on("cpu", kRun + "--train-iters 8 --load " + gpu_dir), reference);
  expect_close_losses(train_on("cuda", kRun + "--train-iters 8 --load " + cpu_dir), reference);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::train
