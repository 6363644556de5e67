// LossSums kept "on the device" (the trainer's step on a GPU: every sum left where the forward ran and read
// with one copy by settle()) against the sums added on the host after each forward: the LM loss, the
// multi-token prediction losses and the MoE load-balancing and z-losses, the same names in the same order
// and the same bits. Run on the CPU through the same path (LossSums::device_sums_on_cpu_too: the kernels'
// CPU side writes the slots); model/cuda/cuda_gpt_model_test.cc runs it on a GPU.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "model/gpt_model.h"
#include "model/model_testing.h"

namespace tessera::model {
namespace {

// DeepSeek-like: two MoE layers (seq aux loss and z-loss) and two multi-token prediction modules, the
// first with an MoE layer of its own (its router's losses come before its module's loss), the second dense.
ModelConfig moe_and_mtp() {
  ModelConfig c = testing::tiny_gpt_config(true, 2, 24, 32);
  c.moe.layer_experts = {8, 8, 8, 0};
  c.moe.ffn_hidden_size = 16;
  c.moe.router.topk = 4;
  c.moe.aux_loss_coeff = 0.1f;
  c.moe.load_balancing = LoadBalancing::SeqAuxLoss;
  c.moe.z_loss_coeff = 0.01f;
  c.mtp_num_layers = 2;
  c.mtp_loss_scaling_factor = 0.3f;
  return c;
}

enum class Sums { OnTheHost, Kept, KeptWithoutHostMask };

struct Summed {
  LossSums losses;
  size_t auxiliary_before_settle = 0, pending_before_settle = 0;
};

// `micro_batches` training forwards of one model into one LossSums, then settle().
Summed forwards(const ModelConfig& c, Sums how, int micro_batches) {
  ParameterSet params;
  GptModel model(c, params);
  params.allocate(42);
  Summed out;
  out.losses.sums_stay_on_device = how != Sums::OnTheHost;
  out.losses.device_sums_on_cpu_too = true;
  const ForwardContext ctx = testing::context(c, 2, true);
  for (int m = 0; m < micro_batches; ++m) {
    MicroBatch mb = testing::random_batch(c, 2, 5 + static_cast<uint64_t>(m));
    for (int64_t i = 0; i < mb.loss_mask.numel(); ++i)  // masks that differ between micro-batches
      if ((i + m) % 7 == 0) mb.loss_mask.f32()[i] = 0.0f;
    if (how == Sums::Kept) mb.host_loss_mask = mb.loss_mask;  // as micro_batch_on leaves it
    GptActivations rec;
    model.forward(mb, Tensor(), ctx, rec, out.losses);
  }
  out.auxiliary_before_settle = out.losses.auxiliary.size();
  out.pending_before_settle = out.losses.pending.size();
  out.losses.settle();
  EXPECT_FALSE(out.losses.slots.defined());
  EXPECT_TRUE(out.losses.pending.empty());
  return out;
}

void expect_same_sums(const LossSums& got, const LossSums& want) {
  EXPECT_EQ(got.lm, want.lm);
  ASSERT_EQ(got.auxiliary.size(), want.auxiliary.size());
  for (size_t i = 0; i < want.auxiliary.size(); ++i) {
    EXPECT_EQ(got.auxiliary[i].first, want.auxiliary[i].first);
    EXPECT_EQ(got.auxiliary[i].second, want.auxiliary[i].second) << want.auxiliary[i].first;
  }
}

// A micro-batch takes 8 slots (three routers' two losses, two modules' losses): 12 take 1 + 96, more than
// the first 64, so the slots grow mid-step.
TEST(LossSumsKeptOnTheDevice, EverySumIsTheHostSumBitForBit) {
  const ModelConfig c = moe_and_mtp();
  for (int micro_batches : {1, 3, 12}) {
    SCOPED_TRACE(micro_batches);
    const Summed host = forwards(c, Sums::OnTheHost, micro_batches);
    const Summed kept = forwards(c, Sums::Kept, micro_batches);
    EXPECT_EQ(host.pending_before_settle, 0u);
    EXPECT_EQ(kept.auxiliary_before_settle, 0u);  // nothing came back before settle()
    EXPECT_EQ(kept.pending_before_settle, static_cast<size_t>(8 * micro_batches));
    const std::vector<std::string> names{"load_balancing_loss", "z_loss", "mtp_1 loss", "mtp_2 loss"};
    ASSERT_EQ(host.losses.auxiliary.size(), names.size());
    for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(host.losses.auxiliary[i].first, names[i]);
    EXPECT_GT(host.losses.lm, 0.0);
    expect_same_sums(kept.losses, host.losses);
  }
}

// Without the host's mask the modules' losses come back per forward (their weights need its counts); the
// rest stays, and the sums are still the host's.
TEST(LossSumsKeptOnTheDevice, WithoutTheHostMaskTheModulesLossesComeBackAsBefore) {
  const ModelConfig c = moe_and_mtp();
  const Summed host = forwards(c, Sums::OnTheHost, 3);
  const Summed kept = forwards(c, Sums::KeptWithoutHostMask, 3);
  EXPECT_EQ(kept.pending_before_settle, 3u * 6u);  // three routers' two losses
  EXPECT_EQ(kept.auxiliary_before_settle, 2u);     // mtp_1, mtp_2
  for (const auto& [name, value] : host.losses.auxiliary) {
    SCOPED_TRACE(name);
    double got = -1;
    for (const auto& [n, v] : kept.losses.auxiliary)
      if (n == name) got = v;
    EXPECT_EQ(got, value);
  }
  EXPECT_EQ(kept.losses.lm, host.losses.lm);
}

// The CPU keeps adding on the host unless told otherwise (what the trainer's CPU runs do).
TEST(LossSumsKeptOnTheDevice, TheCpuAddsOnTheHostByDefault) {
  LossSums sums;
  sums.sums_stay_on_device = true;
  EXPECT_FALSE(sums.keeps_on(Device::cpu()));
  EXPECT_TRUE(sums.keeps_on(Device{DeviceType::CUDA, 0}));
  sums.device_sums_on_cpu_too = true;
  EXPECT_TRUE(sums.keeps_on(Device::cpu()));
  sums.sums_stay_on_device = false;
  EXPECT_FALSE(sums.keeps_on(Device{DeviceType::CUDA, 0}));
  sums.settle();  // nothing kept: nothing to read
  EXPECT_EQ(sums.lm, 0.0);
}

}  // namespace
}  // namespace tessera::model
