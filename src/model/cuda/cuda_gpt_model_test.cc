// A whole GPT's forward and backward on cuda:0 against the same model on the CPU: the model names no
// device, so built and run inside a DefaultDeviceScope its parameters, activations and every kernel
// call are the GPU's (embedding, norms, attention, the linear layers on cuBLASLt, dropout with the
// CPU's masks, the loss; DeepSeek's multi-latent attention and multi-token prediction with their column
// copies and sums; mixture of experts with its router, token dispatch and experts' GEMMs). The loss and
// every gradient must agree. Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>
#include <vector>

#include "kernels/cuda/device_testing.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/precision.h"
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
  int64_t peak = 0;  // the most bytes of tensors held at once during forward and backward (TensorMemory)
};

// Sets parameters after their initialisation, on whichever device they are (an expert bias away from 0).
using Prepare = std::function<void(ParameterSet&)>;

// One forward and backward of the tiny GPT on `device`, from the same seed and batch.
// documents > 0: packed documents of that many tokens (Megatron's --reset-attention-mask).
Run forward_backward(const ModelConfig& c, Device device, const Recompute& recompute = {}, int64_t documents = 0,
                     const Prepare& prepare = {}) {
  const int64_t batch = 2;
  MicroBatch host_batch = testing::random_batch(c, batch, 5);
  if (documents > 0) {
    host_batch.doc_start = Tensor::empty({batch, c.seq_length}, DType::I32, Device::cpu());
    for (int64_t i = 0; i < host_batch.doc_start.numel(); ++i)
      host_batch.doc_start.i32()[i] = static_cast<int32_t>((i % c.seq_length) / documents * documents);
  }
  DefaultDeviceScope scope(device);
  ParameterSet params;
  GptModel model(c, params);
  model.set_recompute(recompute);
  params.allocate(42);
  if (prepare) prepare(params);
  if (c.params_dtype != DType::F32) params.cache_rounded_weights(c.params_dtype);  // as the trainer does
  EXPECT_EQ(params.values().device(), device);
  MicroBatch mb;
  mb.tokens = kernels::to_device(host_batch.tokens, device);
  mb.labels = kernels::to_device(host_batch.labels, device);
  mb.loss_mask = kernels::to_device(host_batch.loss_mask, device);
  if (documents > 0) mb.doc_start = kernels::to_device(host_batch.doc_start, device);
  const ForwardContext ctx = testing::context(c, batch, true);
  GptActivations rec;
  Run run;
  TensorMemory::reset_peak();
  run.loss = model.forward(mb, ctx, rec);
  model.backward(rec, ctx, 1.0f / static_cast<float>(batch * c.seq_length));
  run.peak = TensorMemory::peak_bytes();
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

// fp32: only the order of sums differs. bf16: the GEMM inputs and attention's q, k, v are rounded to
// bf16 on both (the same values), the products accumulated in fp32 in another order, and a value near a
// rounding boundary may round the other way downstream: looser.
void expect_gpu_matches_cpu(const ModelConfig& c, const Recompute& recompute = {}, int64_t documents = 0,
                            const Prepare& prepare = {}) {
  const Run cpu = forward_backward(c, Device::cpu(), {}, documents, prepare);
  const Run gpu = forward_backward(c, kGpu, recompute, documents, prepare);
  const bool fp32 = c.params_dtype == DType::F32;
  EXPECT_NEAR(gpu.loss, cpu.loss, (fp32 ? 1e-5 : 1e-3) * std::fabs(cpu.loss));
  EXPECT_TRUE(grads_close(gpu.grads, cpu.grads, fp32 ? 1e-3f : 2e-2f, fp32 ? 1e-4f : 2e-3f));
}

ModelConfig in_bf16(ModelConfig c) {
  c.params_dtype = DType::BF16;
  return c;
}

// The sums of two micro-batches' forwards, with LossSums::sums_stay_on_device as the trainer's schedule
// sets it (and the host's loss mask beside the device batch, as micro_batch_on leaves it) or without;
// whether anything was still on the device before settle().
std::pair<LossSums, bool> two_forwards(const ModelConfig& c, Device device, bool stays_on_device) {
  DefaultDeviceScope scope(device);
  ParameterSet params;
  GptModel model(c, params);
  params.allocate(42);
  LossSums losses;
  losses.sums_stay_on_device = stays_on_device;
  const ForwardContext ctx = testing::context(c, 2, true);
  for (uint64_t seed : {5, 6}) {
    const MicroBatch host = testing::random_batch(c, 2, seed);
    MicroBatch mb;
    mb.tokens = kernels::to_device(host.tokens, device);
    mb.labels = kernels::to_device(host.labels, device);
    mb.loss_mask = kernels::to_device(host.loss_mask, device);
    mb.host_loss_mask = host.loss_mask;
    GptActivations rec;
    model.forward(mb, Tensor(), ctx, rec, losses);
  }
  const bool held = losses.slots.defined();
  losses.settle();
  EXPECT_FALSE(losses.slots.defined());
  return {losses, held};
}

// Kept on the device across micro-batches and read once (the trainer's step): the same bits as the sums
// copied back after each forward, and the CPU's, which the CPU still adds on the host. The LM loss alone,
// then with the auxiliary losses (two MoE layers' load-balancing and z-losses, two MTP modules).
TEST_F(CudaGptModel, TheLossesKeptOnTheDeviceAreTheLossesCopiedBackAfterEachForward) {
  ModelConfig with_auxiliary = testing::tiny_gpt_config(true, 2, 24, 32);
  with_auxiliary.moe.layer_experts = {8, 8, 8, 0};  // the first MTP module's layer is MoE too
  with_auxiliary.moe.ffn_hidden_size = 16;
  with_auxiliary.moe.router.topk = 4;
  with_auxiliary.moe.aux_loss_coeff = 0.1f;
  with_auxiliary.moe.load_balancing = LoadBalancing::SeqAuxLoss;
  with_auxiliary.moe.z_loss_coeff = 0.01f;
  with_auxiliary.mtp_num_layers = 2;
  with_auxiliary.mtp_loss_scaling_factor = 0.3f;
  for (const ModelConfig& c : {testing::tiny_gpt_config(false, 2, 24, 32), with_auxiliary}) {
    SCOPED_TRACE(c.mtp_num_layers);
    const auto [kept, held] = two_forwards(c, kGpu, true);
    const auto [copied, copied_held] = two_forwards(c, kGpu, false);
    const auto [cpu, cpu_held] = two_forwards(c, Device::cpu(), true);
    EXPECT_TRUE(held);
    EXPECT_FALSE(copied_held);
    EXPECT_FALSE(cpu_held);
    EXPECT_EQ(kept.lm, copied.lm);
    EXPECT_NEAR(kept.lm, cpu.lm, 1e-5 * std::fabs(cpu.lm));
    ASSERT_EQ(kept.auxiliary.size(), copied.auxiliary.size());
    ASSERT_EQ(kept.auxiliary.size(), cpu.auxiliary.size());
    EXPECT_EQ(kept.auxiliary.size(), c.mtp_num_layers > 0 ? 4u : 0u);
    for (size_t i = 0; i < kept.auxiliary.size(); ++i) {
      SCOPED_TRACE(copied.auxiliary[i].first);
      EXPECT_EQ(kept.auxiliary[i].first, copied.auxiliary[i].first);
      EXPECT_EQ(kept.auxiliary[i].second, copied.auxiliary[i].second);
      EXPECT_NEAR(kept.auxiliary[i].second, cpu.auxiliary[i].second, 1e-5 * std::fabs(cpu.auxiliary[i].second));
    }
  }
}

TEST_F(CudaGptModel, Gpt2StyleMatchesTheCpu) {
  expect_gpu_matches_cpu(testing::tiny_gpt_config(false, 2, 24, 32));
}

TEST_F(CudaGptModel, LlamaStyleMatchesTheCpu) {
  expect_gpu_matches_cpu(testing::tiny_gpt_config(true, 2, 24, 32));
}

// Full recomputation on the GPU (each layer's forward run again in backward) against the CPU's plain run.
TEST_F(CudaGptModel, RecomputedLayersMatchTheCpu) {
  expect_gpu_matches_cpu(testing::tiny_gpt_config(true, 3, 24, 32), Recompute{RecomputeMethod::Uniform, 1});
}

TEST_F(CudaGptModel, PackedDocumentsMatchTheCpu) {
  expect_gpu_matches_cpu(testing::tiny_gpt_config(false, 2, 24, 32), {}, 7);
}

TEST_F(CudaGptModel, Gpt2StyleInBf16MatchesTheCpu) {
  expect_gpu_matches_cpu(in_bf16(testing::tiny_gpt_config(false, 2, 24, 32)));
}

TEST_F(CudaGptModel, LlamaStyleInBf16MatchesTheCpu) {
  expect_gpu_matches_cpu(in_bf16(testing::tiny_gpt_config(true, 2, 24, 32)));
}

// The GEMMs on 16-bit buffers (kernels::gpu_16bit_gemm_buffers, the default: bf16 weight copies and
// activations, cuBLASLt's bf16 kernels) against step 1's fp32 buffers on the same GPU: the same input
// values, so the same loss and gradients up to the order of the fp32 sums (and what a rounding that
// order flips does downstream).
TEST_F(CudaGptModel, Bf16On16BitGemmBuffersMatchesTheFp32BufferPath) {
  for (bool llama_style : {false, true}) {
    SCOPED_TRACE(llama_style);
    const ModelConfig c = in_bf16(testing::tiny_gpt_config(llama_style, 2, 24, 32));
    // GPT-2 style keeps its records (the MLP's activation in bf16 for fc2's dW), Llama style recomputes.
    const Recompute recompute = llama_style ? Recompute{RecomputeMethod::Uniform, 1} : Recompute{};
    const auto sixteen = forward_backward(c, kGpu, recompute);
    kernels::set_gpu_16bit_gemm_buffers(false);
    const auto fp32 = forward_backward(c, kGpu, recompute);
    kernels::set_gpu_16bit_gemm_buffers(true);
    EXPECT_NEAR(sixteen.loss, fp32.loss, 1e-3 * std::fabs(fp32.loss));
    EXPECT_TRUE(grads_close(sixteen.grads, fp32.grads, 2e-2f, 2e-3f));
  }
}

// bf16 activations end to end (issue 50): on the GPU the pre-LN norms write their outputs as bf16
// tensors (no fp32 copy), the attention output is encoded once, and both, with the MLP's activation, are
// kept in bf16 from forward to backward and handed to the GEMMs as they are (the attention output widened
// for the attention kernels alone). GPT-2 and Llama style, with recomputation and without: the loss and
// every gradient against the fp32-buffer path on the same GPU (the same values multiplied) and the CPU,
// and the peak of the tensors held no higher than the fp32-buffer path's.
TEST_F(CudaGptModel, Bf16ActivationsMatchTheFp32BufferPathAndTheCpu) {
  for (bool llama_style : {false, true}) {
    for (bool recomputed : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "llama " << llama_style << " recomputed " << recomputed);
      const ModelConfig c = in_bf16(testing::tiny_gpt_config(llama_style, 2, 24, 32));
      const Recompute recompute = recomputed ? Recompute{RecomputeMethod::Uniform, 1} : Recompute{};
      const auto sixteen = forward_backward(c, kGpu, recompute);
      kernels::set_gpu_16bit_gemm_buffers(false);
      const auto fp32 = forward_backward(c, kGpu, recompute);
      kernels::set_gpu_16bit_gemm_buffers(true);
      const auto cpu = forward_backward(c, Device::cpu());
      EXPECT_NEAR(sixteen.loss, fp32.loss, 1e-3 * std::fabs(fp32.loss));
      EXPECT_TRUE(grads_close(sixteen.grads, fp32.grads, 2e-2f, 2e-3f));
      EXPECT_NEAR(sixteen.loss, cpu.loss, 1e-3 * std::fabs(cpu.loss));
      EXPECT_TRUE(grads_close(sixteen.grads, cpu.grads, 2e-2f, 2e-3f));
      EXPECT_LE(sixteen.peak, fp32.peak);
    }
  }
}

// DeepSeek's parts (issues 53/50): multi-latent attention with a query latent, latent norms and YaRN
// (an original context of 8 positions, so that its ramp and mscale act here), values narrower than the
// heads (the zero-padded copies), and `mtp_layers` multi-token prediction modules.
ModelConfig deepseek_style(int64_t mtp_layers) {
  ModelConfig c = testing::tiny_gpt_config(true, 2, 24, 32);
  c.num_query_groups = c.num_attention_heads;  // MLA's keys and values are per head
  c.qk_layernorm = true;
  c.mla.enabled = true;
  c.mla.q_lora_rank = 12;
  c.mla.kv_lora_rank = 6;
  c.mla.qk_head_dim = 4;
  c.mla.qk_pos_emb_head_dim = 4;
  c.mla.v_head_dim = 3;
  c.mla.yarn = true;
  c.mla.rotary_scaling_factor = 4;
  c.mla.mscale = 0.9;
  c.mla.mscale_all_dim = 0.6;
  c.mla.original_max_position_embeddings = 8;
  c.mtp_num_layers = mtp_layers;
  c.mtp_loss_scaling_factor = 0.3f;
  return c;
}

TEST_F(CudaGptModel, MultiLatentAttentionWithYarnMatchesTheCpu) { expect_gpu_matches_cpu(deepseek_style(0)); }

// GPT-2 style: the rolled tokens and learned positions of two modules, the tied table's gradient.
TEST_F(CudaGptModel, MultiTokenPredictionMatchesTheCpu) {
  ModelConfig c = testing::tiny_gpt_config(false, 2, 24, 32);
  c.mtp_num_layers = 2;
  c.mtp_loss_scaling_factor = 0.3f;
  expect_gpu_matches_cpu(c);
}

TEST_F(CudaGptModel, DeepSeekStyleMatchesTheCpu) { expect_gpu_matches_cpu(deepseek_style(1)); }

TEST_F(CudaGptModel, DeepSeekStyleInBf16MatchesTheCpu) { expect_gpu_matches_cpu(in_bf16(deepseek_style(1))); }

// Mixture of experts (issues 53/56): 8 experts per layer, each token's top 4. The routing is a discrete
// choice from logits the GPU's GEMM computes in another order, so a token whose 4th and 5th experts were
// within an ulp could route differently; the seeds here leave every margin far wider.
ModelConfig moe_style(bool llama_style) {
  ModelConfig c = testing::tiny_gpt_config(llama_style, 2, 24, 32);
  c.moe.layer_experts = {8, 8};
  c.moe.ffn_hidden_size = 16;
  c.moe.router.topk = 4;
  c.moe.aux_loss_coeff = 0.1f;
  return c;
}

// DeepSeek-V3's router: sigmoid scores with a nonzero expert bias, top-4 within 2 of 4 groups, the
// scaling factor, the sequence-level aux loss and the z-loss, beside a shared expert.
TEST_F(CudaGptModel, MoeWithSigmoidRouterExpertBiasGroupsAndSharedExpertMatchesTheCpu) {
  ModelConfig c = moe_style(true);
  c.moe.router.score = kernels::RouterScoreFunction::Sigmoid;
  c.moe.router.num_groups = 4;
  c.moe.router.group_topk = 2;
  c.moe.router.scaling_factor = 2.5f;
  c.moe.expert_bias = true;
  c.moe.load_balancing = LoadBalancing::SeqAuxLoss;
  c.moe.z_loss_coeff = 0.01f;
  c.moe.shared_expert_intermediate_size = 16;
  expect_gpu_matches_cpu(c, {}, 0, [](ParameterSet& params) {
    for (Parameter& p : params.params()) {
      if (p.spec.trained()) continue;  // the expert biases: -0.05, 0, 0.05, ...
      std::vector<float> bias(static_cast<size_t>(p.value.numel()));
      for (size_t e = 0; e < bias.size(); ++e) bias[e] = 0.05f * static_cast<float>(e % 3) - 0.05f;
      Tensor host = Tensor::empty(p.value.shape(), DType::F32, Device::cpu());
      std::copy(bias.begin(), bias.end(), host.host_f32());
      kernels::transfer(p.value, host);
    }
  });
}

// The softmax router with token dropping (capacity 1.0, padded to it), the grouped GEMM and the router's
// input jitter, GPT-2 style.
TEST_F(CudaGptModel, MoeWithCapacityGroupedGemmAndJitterMatchesTheCpu) {
  ModelConfig c = moe_style(false);
  c.moe.router.topk = 2;
  c.moe.capacity_factor = 1.0;
  c.moe.pad_expert_input_to_capacity = true;
  c.moe.grouped_gemm = true;
  c.moe.input_jitter_eps = 0.05f;
  expect_gpu_matches_cpu(c);
}

}  // namespace
}  // namespace tessera::model
