// A whole BERT's forward and backward on cuda:0 against the same model on the CPU (issues 50/56): built
// and run inside a DefaultDeviceScope, its word, position and token-type embeddings, the bidirectional
// attention over the padding mask (the tiled kernels, the default), the pre-LN and post-LN layers, the
// masked-LM head (dense, GELU, LayerNorm, tied logits plus the vocab-parallel bias, the loss over masked
// positions), the pooler's tanh and the sentence-order head with its two-way cross-entropy run on the GPU.
// The masked-LM loss, the sentence-order loss and every gradient must agree, in fp32 and bf16. The
// micro-batch comes as the trainer hands it over (ids checked on the host before the upload).
// Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cuda/device_testing.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/tensor_ops.h"
#include "model/bert_model.h"
#include "model/bert_testing.h"
#include "model/model_testing.h"

namespace tessera::model {
namespace {

using cuda::testing::kGpu;

class CudaBertModel : public cuda::testing::CudaKernelTest {
 protected:
  void SetUp() override {
    CudaKernelTest::SetUp();
    if (!IsSkipped()) cuda::register_gemm_backend();
  }
};

struct BertRun {
  double lm = 0, sop = 0;
  Tensor grads;  // on the host
};

// 40 positions: the 32-key tiles of the attention kernels are crossed, and the padding starts inside the
// first tile (6 tokens), inside the second (29) or nowhere (40).
constexpr int64_t kSeq = 40;
const std::vector<int64_t> kLengths = {40, 29, 6};

// One forward and backward of the tiny BERT on `device`, from the same seed and batch.
BertRun forward_backward(const ModelConfig& c, Device device, const Recompute& recompute = {}) {
  const MicroBatch host = testing::bert_batch(c, kLengths, 5);
  const int64_t batch = static_cast<int64_t>(kLengths.size());
  DefaultDeviceScope scope(device);
  ParameterSet params;
  BertModel model(c, params);
  model.set_recompute(recompute);
  params.allocate(42);
  if (c.params_dtype != DType::F32) params.cache_rounded_weights(c.params_dtype);  // as the trainer does
  EXPECT_EQ(params.values().device(), device);
  MicroBatch mb;
  auto on = [&](const Tensor& t) { return t.defined() ? kernels::to_device(t, device) : Tensor(); };
  mb.tokens = on(host.tokens);
  mb.labels = on(host.labels);
  mb.loss_mask = on(host.loss_mask);
  mb.padding_mask = on(host.padding_mask);
  mb.token_types = on(host.token_types);
  mb.sentence_order = on(host.sentence_order);
  // As train::micro_batch_on hands a GPU's batch over: ids checked on the host (the CPU run checks them
  // itself, on its tensors).
  if (device != Device::cpu()) mb.ids_checked_below = c.vocab_size;
  ForwardContext ctx = testing::context(c, batch, true);
  ctx.per_sample_loss_weight = 2.5;  // the sentence-order loss enters the objective this much heavier
  BertActivations rec;
  LossSums losses;
  model.forward(mb, Tensor(), ctx, rec, losses);
  model.backward(rec, Tensor(), ctx, 1.0f / static_cast<float>(batch * c.seq_length));
  BertRun run;
  run.lm = losses.lm;
  EXPECT_EQ(losses.auxiliary.size(), c.bert_binary_head ? 1u : 0u);
  for (const auto& [name, value] : losses.auxiliary)
    if (name == "sop loss") run.sop = value;
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

// fp32: only the order of sums differs. bf16: the GEMM inputs and attention's q, k, v are rounded to bf16
// on both (the same values), the products accumulated in fp32 in another order, and a value near a
// rounding boundary may round the other way downstream: looser (the GPT test's tolerances).
void expect_gpu_matches_cpu(const ModelConfig& c, const Recompute& recompute = {}) {
  const BertRun cpu = forward_backward(c, Device::cpu());
  const BertRun gpu = forward_backward(c, kGpu, recompute);
  const bool fp32 = c.params_dtype == DType::F32;
  const double loss_rtol = fp32 ? 1e-5 : 1e-3;
  EXPECT_GT(cpu.lm, 0.0);
  EXPECT_NEAR(gpu.lm, cpu.lm, loss_rtol * std::fabs(cpu.lm)) << "lm loss";
  if (c.bert_binary_head) {
    EXPECT_GT(cpu.sop, 0.0);
  }
  EXPECT_NEAR(gpu.sop, cpu.sop, loss_rtol * std::fabs(cpu.sop)) << "sop loss";
  EXPECT_TRUE(grads_close(gpu.grads, cpu.grads, fp32 ? 1e-3f : 2e-2f, fp32 ? 1e-4f : 2e-3f));
}

ModelConfig bert(bool post_ln, bool binary_head, DType dtype = DType::F32) {
  ModelConfig c = testing::tiny_bert_config(post_ln, binary_head, kSeq);
  c.params_dtype = dtype;
  return c;
}

TEST_F(CudaBertModel, PreLnWithTheBinaryHeadMatchesTheCpu) { expect_gpu_matches_cpu(bert(false, true)); }

// The original BERT ordering (--apply-residual-connection-post-layernorm): each residual from its norm.
TEST_F(CudaBertModel, PostLnWithTheBinaryHeadMatchesTheCpu) { expect_gpu_matches_cpu(bert(true, true)); }

// --bert-no-binary-head: no token types, no pooler, the masked-LM loss alone.
TEST_F(CudaBertModel, WithoutTheBinaryHeadMatchesTheCpu) { expect_gpu_matches_cpu(bert(false, false)); }

// Full recomputation on the GPU (each layer's forward, its padding-masked attention included, run again in
// backward) against the CPU's plain run.
TEST_F(CudaBertModel, RecomputedLayersMatchTheCpu) {
  expect_gpu_matches_cpu(bert(true, true), Recompute{RecomputeMethod::Uniform, 1});
}

TEST_F(CudaBertModel, PreLnInBf16MatchesTheCpu) { expect_gpu_matches_cpu(bert(false, true, DType::BF16)); }

TEST_F(CudaBertModel, PostLnInBf16MatchesTheCpu) { expect_gpu_matches_cpu(bert(true, true, DType::BF16)); }

// Padding is invisible on the GPU too: other ids and token types at the padded positions give the same
// losses and gradients (no dropout: its masks are keyed by position, not by content). Within fp32's
// rounding rather than bit for bit, so that a GEMM's split of a sum over rows may differ; a padded key
// that leaked into attention would move them by far more.
TEST_F(CudaBertModel, WhatThePaddedPositionsHoldChangesNothing) {
  ModelConfig c = bert(false, true);
  c.hidden_dropout = c.attention_dropout = 0.0f;
  const int64_t batch = static_cast<int64_t>(kLengths.size());
  auto run = [&](bool scribble) {
    MicroBatch host = testing::bert_batch(c, kLengths, 7);
    if (scribble)
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t j = kLengths[b]; j < kSeq; ++j) {
          host.tokens.i32()[b * kSeq + j] = static_cast<int32_t>((j * 5 + b) % c.vocab_size);
          host.token_types.i32()[b * kSeq + j] = 1;
        }
    DefaultDeviceScope scope(kGpu);
    ParameterSet params;
    BertModel model(c, params);
    params.allocate(3);
    MicroBatch mb = host;
    for (Tensor* t : {&mb.tokens, &mb.labels, &mb.loss_mask, &mb.padding_mask, &mb.token_types, &mb.sentence_order})
      *t = kernels::to_device(*t, kGpu);
    const ForwardContext ctx = testing::context(c, batch, true);
    BertActivations rec;
    LossSums losses;
    model.forward(mb, Tensor(), ctx, rec, losses);
    model.backward(rec, Tensor(), ctx, 0.25f);
    BertRun r;
    r.lm = losses.lm;
    r.sop = losses.auxiliary.at(0).second;
    r.grads = kernels::to_device(params.grads(), Device::cpu()).clone();
    return r;
  };
  const BertRun plain = run(false), scribbled = run(true);
  EXPECT_NEAR(scribbled.lm, plain.lm, 1e-6 * std::fabs(plain.lm));
  EXPECT_NEAR(scribbled.sop, plain.sop, 1e-6 * std::fabs(plain.sop));
  EXPECT_TRUE(grads_close(scribbled.grads, plain.grads, 1e-5f, 1e-6f));
}

}  // namespace
}  // namespace tessera::model
