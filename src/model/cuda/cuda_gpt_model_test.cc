// A whole GPT's forward and backward on cuda:0 against the same model on the CPU: the model names no
// device, so built and run inside a DefaultDeviceScope its parameters, activations and every kernel
// call are the GPU's (embedding, norms, attention, the linear layers on cuBLASLt, dropout with the
// CPU's masks, the loss). The loss and every gradient must agree. Skipped, with CUDA's reason, where no
// GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/device_testing.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/tensor_ops.h"
#include "model/gpt_model.h"
#include "model/model_testing.h"

namespace tessera::model {
namespace {

using cuda::testing::kGpu;

class CudaGptModel : public cuda::testing::CudaKernelTest {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (!IsSkipped()) cuda::register_gemm_backend();
  }
};

struct Run {
  double loss = 0;
  Tensor grads;  // on the host
};

// One forward and backward of the tiny GPT on `device`, from the same seed and batch.
Run forward_backward(const ModelConfig& c, Device device) {
  const int64_t batch = 2;
  const MicroBatch host_batch = testing::random_batch(c, batch, 5);
  DefaultDeviceScope scope(device);
  ParameterSet params;
  GptModel model(c, params);
  params.allocate(42);
  EXPECT_EQ(params.values().device(), device);
  MicroBatch mb;
  mb.tokens = kernels::to_device(host_batch.tokens, device);
  mb.labels = kernels::to_device(host_batch.labels, device);
  mb.loss_mask = kernels::to_device(host_batch.loss_mask, device);
  const ForwardContext ctx = testing::context(c, batch, true);
  GptActivations rec;
  Run run;
  run.loss = model.forward(mb, ctx, rec);
  model.backward(rec, ctx, 1.0f / static_cast<float>(batch * c.seq_length));
  run.grads = kernels::to_device(params.grads(), Device::cpu()).clone();
  return run;
}

// Within rtol of the CPU's, or of the largest gradient's magnitude times atol_fraction (a gradient near
// zero is a difference of larger terms summed in another order).
::testing::AssertionResult grads_close(const Tensor& gpu, const Tensor& cpu, float rtol, float atol_fraction) {
  float largest = 0;
  for (int64_t i = 0; i < cpu.numel(); ++i) largest = std::max(largest, std::fabs(cpu.f32()[i]));
  return cuda::testing::all_close(gpu, cpu, rtol, atol_fraction * largest);
}

void expect_gpu_matches_cpu(const ModelConfig& c) {
  const Run cpu = forward_backward(c, Device::cpu());
  const Run gpu = forward_backward(c, kGpu);
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * std::fabs(cpu.loss));
  EXPECT_TRUE(grads_close(gpu.grads, cpu.grads, 1e-3f, 1e-4f));
}

TEST_F(CudaGptModel, Gpt2StyleMatchesTheCpu) {
  expect_gpu_matches_cpu(testing::tiny_gpt_config(false, 2, 24, 32));
}

TEST_F(CudaGptModel, LlamaStyleMatchesTheCpu) {
  expect_gpu_matches_cpu(testing::tiny_gpt_config(true, 2, 24, 32));
}

}  // namespace
}  // namespace tessera::model
