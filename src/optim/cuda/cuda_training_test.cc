// Twenty training steps of a tiny GPT on cuda:0 (forward, backward, the gradient norm and AdamW with
// clipping, all on the GPU) against the same steps on the CPU: the losses agree within 1e-4 relative at
// every step, in GPT-2 and Llama styles with dropout on. The model and the optimizer name no device: a
// DefaultDeviceScope puts them on the GPU. Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cuda/device_testing.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/tensor_ops.h"
#include "model/gpt_model.h"
#include "model/model_testing.h"
#include "optim/adamw_optimizer.h"

namespace tessera::optim {
namespace {

using cuda::testing::kGpu;

class CudaTraining : public cuda::testing::CudaKernelTest {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (!IsSkipped()) cuda::register_gemm_backend();
  }
};

constexpr int kSteps = 20;

struct Losses {
  std::vector<double> loss;
  std::vector<double> grad_norm;
};

Losses train(const model::ModelConfig& c, Device device) {
  const int64_t batch = 4;
  DefaultDeviceScope scope(device);
  model::ParameterSet params;
  model::GptModel gpt(c, params);
  params.allocate(42);
  AdamWOptimizer optimizer(params, AdamWConfig{0.1f, 0.9f, 0.95f, 1e-8f, 1.0f});
  Losses out;
  for (int step = 0; step < kSteps; ++step) {
    const model::MicroBatch host = model::testing::random_batch(c, batch, 100 + step % 4);  // a few batches, revisited
    model::MicroBatch mb;
    mb.tokens = kernels::to_device(host.tokens, device);
    mb.labels = kernels::to_device(host.labels, device);
    mb.loss_mask = kernels::to_device(host.loss_mask, device);
    model::ForwardContext ctx = model::testing::context(c, batch, true);
    ctx.iteration = step;
    params.grads().zero_();
    model::GptActivations rec;
    out.loss.push_back(gpt.forward(mb, ctx, rec));
    gpt.backward(rec, ctx, 1.0f / static_cast<float>(batch * c.seq_length));
    const StepResult r = optimizer.step(3e-3f);
    EXPECT_FALSE(r.skipped);
    out.grad_norm.push_back(r.grad_norm);
    params.weights_changed();
  }
  return out;
}

void expect_same_training(const model::ModelConfig& c) {
  const Losses cpu = train(c, Device::cpu()), gpu = train(c, kGpu);
  ASSERT_EQ(gpu.loss.size(), cpu.loss.size());
  for (size_t i = 0; i < cpu.loss.size(); ++i) {
    EXPECT_NEAR(gpu.loss[i], cpu.loss[i], 1e-4 * std::fabs(cpu.loss[i])) << "step " << i;
    EXPECT_NEAR(gpu.grad_norm[i], cpu.grad_norm[i], 1e-3 * cpu.grad_norm[i]) << "step " << i;
  }
  EXPECT_LT(cpu.loss.back(), cpu.loss.front());  // it learns
}

TEST_F(CudaTraining, Gpt2StyleTwentyStepsMatchTheCpu) {
  expect_same_training(model::testing::tiny_gpt_config(false, 2, 32, 32));
}

TEST_F(CudaTraining, LlamaStyleTwentyStepsMatchTheCpu) {
  expect_same_training(model::testing::tiny_gpt_config(true, 2, 32, 32));
}

}  // namespace
}  // namespace tessera::optim
