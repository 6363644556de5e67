// Knowledge distillation (--kd) with --device cuda against the same run with --device cpu (issue 56):
// the teacher built and loaded on the GPU (its checkpoint, saved by a CPU run, staged through the host),
// its logits and the KD loss's kernels there. Every iteration's LM loss and KD term and the validation's,
// fp32 and bf16, a wider dense teacher and a deeper MoE one, and one step's gradients, element by element.
// Skipped, with CUDA's reason, where no GPU is usable.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/device_testing.h"
#include "model/vocab_parallel_distillation.h"
#include "train/args/arguments.h"
#include "train/trainer.h"
#include "train/trainer_testing.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;
const char* kKd = model::kDistillationLossName;

// Dropout off: the student's dropout masks are the CPU's Philox ones on either device, but without them a
// mismatch can only be the kernels'.
const std::string kModel =
    "--hidden-size 64 --num-attention-heads 4 --seq-length 32 --mock-data --tokenizer-type NullTokenizer "
    "--vocab-size 96 --micro-batch-size 2 --global-batch-size 4 --lr 1e-2 --lr-warmup-iters 2 --log-interval 4 "
    "--eval-interval 8 --eval-iters 1 --hidden-dropout 0 --attention-dropout 0 ";
const std::string kStudent = kModel + "--num-layers 2 ";

class CudaDistillation : public cuda::testing::CudaKernelTest {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / str_cat("tessera_cuda_distillation_test_", ::getpid());
    fs::remove_all(dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  // A teacher trained on the CPU for 4 iterations, once per process; " --kd --load-teacher DIR".
  static std::string teacher(const std::string& name) {
    const std::map<std::string, std::string> flags{
        {"wider", kModel + "--num-layers 3 --hidden-size 96 --ffn-hidden-size 160"},
        {"deeper_moe", kModel + "--num-layers 3 --num-experts 4 --moe-layer-freq 2 --moe-router-topk 2 "
                       "--moe-ffn-hidden-size 64"}};
    const fs::path dir = dir_ / name;
    if (!fs::exists(dir)) {
      Trainer t(parse_train_arguments(testing::split_flags(flags.at(name) + " --train-iters 4 --device cpu --save " +
                                                           dir.string())));
      t.train();
    }
    return " --kd --load-teacher " + dir.string();
  }
  static fs::path dir_;
};
fs::path CudaDistillation::dir_;

struct KdRun {
  std::vector<double> losses, kd;  // per iteration
  double validation = 0, kd_validation = 0;
  int64_t teacher_forwards = 0;
  Device device;
  Tensor grads;  // the last step's, on the host
};

KdRun train_on(const std::string& device, const std::string& flags) {
  Trainer t(parse_train_arguments(testing::split_flags(flags + " --device " + device)));
  KdRun r;
  r.device = t.parameters().values().device();
  t.train();
  r.losses = t.losses();
  r.kd = t.auxiliary_losses().at(kKd);
  r.teacher_forwards = t.teacher_forwards();
  const Tensor& g = t.parameters().grads();
  r.grads = g.device() == Device::cpu() ? g.clone() : cuda::testing::to_host(g);
  const Evaluation e = t.evaluate();
  r.validation = e.lm_loss;
  for (const auto& [name, value] : e.auxiliary)
    if (name == kKd) r.kd_validation = value;
  return r;
}

void expect_same_run(const KdRun& gpu, const KdRun& cpu, double rtol) {
  EXPECT_EQ(gpu.device, (Device{DeviceType::CUDA, 0}));
  EXPECT_EQ(cpu.device, Device::cpu());
  EXPECT_EQ(gpu.teacher_forwards, cpu.teacher_forwards);
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  ASSERT_EQ(gpu.kd.size(), cpu.kd.size());
  ASSERT_EQ(cpu.kd.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], rtol * std::fabs(cpu.losses[i])) << "lm loss, iteration " << i + 1;
    EXPECT_GT(cpu.kd[i], 0.0) << "iteration " << i + 1;
    EXPECT_NEAR(gpu.kd[i], cpu.kd[i], rtol * cpu.kd[i]) << "kd loss, iteration " << i + 1;
  }
  EXPECT_NEAR(gpu.validation, cpu.validation, rtol * std::fabs(cpu.validation));
  EXPECT_GT(cpu.kd_validation, 0.0);
  EXPECT_NEAR(gpu.kd_validation, cpu.kd_validation, rtol * cpu.kd_validation);
}

TEST_F(CudaDistillation, AWiderTeacherDistilsAsOnTheCpu) {
  const std::string flags =
      kStudent + "--train-iters 8 --kd-temp 1.5 --kd-alpha-ce 0.5 --kd-beta-ce 2" + teacher("wider");
  expect_same_run(train_on("cuda", flags), train_on("cpu", flags), 1e-4);
}

TEST_F(CudaDistillation, ADeeperMoeTeacherDistilsInBf16AsOnTheCpu) {
  const std::string flags = kStudent + "--train-iters 8 --bf16" + teacher("deeper_moe");
  expect_same_run(train_on("cuda", flags), train_on("cpu", flags), 2e-2);
}

// One step from the same initial weights, no clipping: every gradient element of the student (the KD
// term's and the cross-entropy's through the whole model) within 1e-4 of the largest.
TEST_F(CudaDistillation, OneStepsGradientsMatchTheCpu) {
  const std::string flags = kStudent + "--train-iters 1 --clip-grad 0 --kd-temp 2" + teacher("wider");
  const KdRun gpu = train_on("cuda", flags), cpu = train_on("cpu", flags);
  ASSERT_EQ(gpu.grads.numel(), cpu.grads.numel());
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < cpu.grads.numel(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(cpu.grads.f32()[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(gpu.grads.f32()[i]) - cpu.grads.f32()[i]));
  }
  EXPECT_GT(scale, 0.0);
  EXPECT_LE(worst, 1e-4 * scale);
  EXPECT_NEAR(gpu.kd[0], cpu.kd[0], 1e-5 * cpu.kd[0]);
}

}  // namespace
}  // namespace tessera::train
