// TeraPipe's token slices (model/token_sliced_chunk.h) on cuda:0 against the same sliced step on the CPU:
// a GPT built and run inside a DefaultDeviceScope, wrapped by with_token_slices, so each slice's tokens,
// positions and labels are cut on the GPU, each layer's key/value cache and its gradients live there, and
// each slice's attention runs the CUDA kernels with its queries at an offset (kv_seq = offset + seq,
// dropout keyed by the whole sequence). The LM loss, multi-token prediction's mtp_k losses (the modules
// run over the whole sequence after the last slice) and every gradient must agree, in fp32 and bf16.
// (The CPU's sliced step is the unsliced one's: model/token_sliced_chunk_test.cc.) The micro-batch
// arrives as the trainer hands it over (ids checked on the host, the loss kept on the device and read
// once). Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/device_testing.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/tensor_ops.h"
#include "model/gpt_model.h"
#include "model/model_testing.h"
#include "model/token_sliced_chunk.h"

namespace tessera::model {
namespace {

using cuda::testing::kGpu;

class CudaTokenSlices : public cuda::testing::CudaKernelTest {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (!IsSkipped()) cuda::register_gemm_backend();
  }
};

struct Step {
  double loss = 0;
  std::vector<std::pair<std::string, double>> auxiliary;
  Tensor grads;  // on the host
};

// One training step's forward and backward of the whole model cut into `slices`, on `device`.
Step run_step(const ModelConfig& c, const std::vector<int64_t>& slices, Device device, const Recompute& recompute) {
  const int64_t batch = 2;
  const float grad_scale = 0.125f;
  const MicroBatch host = testing::random_batch(c, batch, 11);
  DefaultDeviceScope scope(device);
  ParameterSet params;
  std::unique_ptr<LanguageModelChunk> model = with_token_slices(std::make_unique<GptModel>(c, params), slices);
  model->set_recompute(recompute);
  params.allocate(5);
  if (c.params_dtype != DType::F32) params.cache_rounded_weights(c.params_dtype);  // as the trainer does
  EXPECT_EQ(params.values().device(), device);
  MicroBatch mb;
  mb.tokens = kernels::to_device(host.tokens, device);
  mb.labels = kernels::to_device(host.labels, device);
  mb.loss_mask = kernels::to_device(host.loss_mask, device);
  mb.ids_checked_below = c.vocab_size;  // train/device_setup.h's micro_batch_on checked them on the host
  ForwardContext ctx = testing::context(c, batch, /*training=*/true);
  ctx.loss_grad_scale = grad_scale;  // the trainer's schedule sets it: the head fuses the loss's gradient
  std::unique_ptr<ChunkRecord> rec = model->make_record();
  LossSums losses;
  losses.sums_stay_on_device = true;
  EXPECT_FALSE(model->forward(mb, Tensor(), ctx, *rec, losses).defined());
  model->backward(*rec, Tensor(), ctx, grad_scale);
  losses.settle();
  Step s;
  s.loss = losses.lm;
  s.auxiliary = losses.auxiliary;
  s.grads = kernels::to_device(params.grads(), Device::cpu()).clone();
  return s;
}

// Within rtol of the CPU's, or of the largest gradient's magnitude times atol_fraction (a gradient near
// zero is a difference of larger terms summed in another order), as model_cuda_gpt_model_test.
::testing::AssertionResult grads_close(const Tensor& gpu, const Tensor& cpu, float rtol, float atol_fraction) {
  float largest = 0;
  for (int64_t i = 0; i < cpu.numel(); ++i) largest = std::max(largest, std::fabs(cpu.f32()[i]));
  if (largest == 0) return ::testing::AssertionFailure() << "every gradient is zero: the step compared nothing";
  return cuda::testing::all_close(gpu, cpu, rtol, atol_fraction * largest);
}

// fp32: only the order of sums differs; bf16: a value near a rounding boundary may round the other way.
void expect_gpu_matches_cpu(const ModelConfig& c, const std::vector<int64_t>& slices, const Recompute& recompute = {}) {
  SCOPED_TRACE(str_cat(slices.size(), " slices, the first of ", slices[0], " tokens"));
  const Step cpu = run_step(c, slices, Device::cpu(), {});
  const Step gpu = run_step(c, slices, kGpu, recompute);
  const bool fp32 = c.params_dtype == DType::F32;
  const double loss_rtol = fp32 ? 1e-5 : 1e-3;
  EXPECT_NEAR(gpu.loss, cpu.loss, loss_rtol * std::fabs(cpu.loss));
  ASSERT_EQ(gpu.auxiliary.size(), cpu.auxiliary.size());
  EXPECT_EQ(cpu.auxiliary.size(), static_cast<size_t>(c.mtp_num_layers));
  for (size_t i = 0; i < cpu.auxiliary.size(); ++i) {
    EXPECT_EQ(gpu.auxiliary[i].first, cpu.auxiliary[i].first);
    EXPECT_NEAR(gpu.auxiliary[i].second, cpu.auxiliary[i].second, loss_rtol * std::fabs(cpu.auxiliary[i].second))
        << cpu.auxiliary[i].first;
  }
  EXPECT_TRUE(grads_close(gpu.grads, cpu.grads, fp32 ? 1e-3f : 2e-2f, fp32 ? 1e-4f : 2e-3f));
}

// 3 layers over 64 tokens (hidden 16, 4 heads of 4), dropout on, as model_token_sliced_chunk_test.
ModelConfig tiny(bool llama_style) { return testing::tiny_gpt_config(llama_style, 3, 64, 64); }

ModelConfig in_bf16(ModelConfig c) {
  c.params_dtype = DType::BF16;
  return c;
}

ModelConfig with_mtp(ModelConfig c, int64_t depths) {
  c.mtp_num_layers = depths;
  c.mtp_loss_scaling_factor = 0.3f;
  return c;
}

// Equal slices, uneven ones across the 32-key tile, and one-token slices at both ends.
const std::vector<std::vector<int64_t>> kSlicings = {{16, 16, 16, 16}, {8, 24, 16, 16}, {1, 62, 1}};

TEST_F(CudaTokenSlices, Gpt2StyleMatchesTheCpu) {
  for (const auto& slices : kSlicings) expect_gpu_matches_cpu(tiny(false), slices);
}

TEST_F(CudaTokenSlices, LlamaStyleMatchesTheCpu) {
  for (const auto& slices : kSlicings) expect_gpu_matches_cpu(tiny(true), slices);
}

TEST_F(CudaTokenSlices, Gpt2StyleInBf16MatchesTheCpu) {
  expect_gpu_matches_cpu(in_bf16(tiny(false)), {8, 24, 16, 16});
}

// Recomputed layers write and read the cache again in backward (the CPU's run keeps its records).
TEST_F(CudaTokenSlices, LlamaStyleInBf16RecomputedMatchesTheCpu) {
  expect_gpu_matches_cpu(in_bf16(tiny(true)), {8, 24, 16, 16}, Recompute{RecomputeMethod::Uniform, 2});
}

// Multi-token prediction: the modules wait for the last slice and run over the whole sequence (its h0
// gathered from the slices' parts on the GPU), then hand each slice its part of the gradient.
TEST_F(CudaTokenSlices, MultiTokenPredictionMatchesTheCpu) {
  for (const auto& slices : kSlicings) expect_gpu_matches_cpu(with_mtp(tiny(false), 2), slices);
  expect_gpu_matches_cpu(with_mtp(tiny(true), 1), {16, 16, 16, 16});
}

TEST_F(CudaTokenSlices, MultiTokenPredictionInBf16MatchesTheCpu) {
  expect_gpu_matches_cpu(in_bf16(with_mtp(tiny(false), 2)), {8, 24, 16, 16});
  expect_gpu_matches_cpu(in_bf16(with_mtp(tiny(true), 1)), {1, 62, 1});
}

// Multi-latent attention: the cache holds each head's up-projected key [no-RoPE | RoPE] (zero-padded to
// the values' width) and value, the RoPE part rotated with YaRN at the slice's global positions.
TEST_F(CudaTokenSlices, MultiLatentAttentionWithMtpMatchesTheCpu) {
  ModelConfig c = with_mtp(tiny(true), 1);
  c.num_query_groups = c.num_attention_heads;
  c.qk_layernorm = true;
  c.mla.enabled = true;
  c.mla.q_lora_rank = 12;
  c.mla.kv_lora_rank = 8;
  c.mla.qk_head_dim = 6;
  c.mla.qk_pos_emb_head_dim = 4;
  c.mla.v_head_dim = 12;
  c.mla.yarn = true;
  c.mla.rotary_scaling_factor = 4;
  c.mla.mscale = 0.8;
  c.mla.mscale_all_dim = 0.5;
  c.mla.original_max_position_embeddings = 8;
  expect_gpu_matches_cpu(c, {8, 24, 16, 16});
  expect_gpu_matches_cpu(in_bf16(c), {16, 16, 16, 16});
}

}  // namespace
}  // namespace tessera::model
