// The MoE kernels on cuda:0 (kernels/cuda/moe_routing.cu, moe_combine.cu, and the grouped linear layers
// and row padding of kernels/grouped_linear.cc) through the tensor entry points, against the CPU. The
// router's choices and probabilities, their gradients, the aux loss's counts, terms and gradient, the
// token rows, gathers, scatters, dots, the jitter and the combine's scatters are the CPU's bit for bit
// (the same row functions, no FMA contraction on either side); ties in the logits are frequent here
// (values on a grid of 1/8) so the tie order is checked too. The z-loss (logf) and the residual mix
// (double exp) are within an ulp or two; the experts' GEMMs (cuBLASLt) within fp32 sums' reordering.
// Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cuda/device_testing.h"
#include "kernels/dropout.h"
#include "kernels/grouped_linear.h"
#include "kernels/moe_combine.h"
#include "kernels/moe_routing.h"
#include "kernels/tensor_ops.h"
#include "kernels/vocab_parallel_loss.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using kernels::RouterScoreFunction;
using kernels::TopkRouterOptions;
using CudaMoeRouting = CudaKernelTest;

// Logits on a grid of 1/8 in [-2, 2): many exact ties between experts.
Tensor tied_logits(int64_t tokens, int64_t experts, uint64_t seed) {
  Tensor t = random({tokens, experts}, seed, -2.0f, 2.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std::round(t.f32()[i] * 8.0f) / 8.0f;
  return t;
}

struct RouterCase {
  std::string name;
  TopkRouterOptions opt;
  bool bias;
};

std::vector<RouterCase> router_cases() {
  std::vector<RouterCase> cases;
  auto add = [&](const std::string& name, RouterScoreFunction score, int64_t k, bool pre, int64_t groups,
                 int64_t group_topk, bool bias) {
    TopkRouterOptions o;
    o.topk = k;
    o.score = score;
    o.pre_softmax = pre;
    o.num_groups = groups;
    o.group_topk = group_topk;
    o.scaling_factor = k == 4 ? 2.5f : 1.0f;
    cases.push_back({name, o, bias});
  };
  add("softmax top-2", RouterScoreFunction::Softmax, 2, false, 0, 0, false);
  add("softmax pre-softmax top-2", RouterScoreFunction::Softmax, 2, true, 0, 0, false);
  add("sigmoid top-1", RouterScoreFunction::Sigmoid, 1, false, 0, 0, false);
  add("sigmoid top-4 expert bias", RouterScoreFunction::Sigmoid, 4, false, 0, 0, true);
  add("softmax top-4 in 2 of 4 groups", RouterScoreFunction::Softmax, 4, false, 4, 2, false);
  add("sigmoid top-4 in 2 of 4 groups expert bias", RouterScoreFunction::Sigmoid, 4, false, 4, 2, true);
  return cases;
}

TEST_F(CudaMoeRouting, RouterForwardAndBackwardAreTheCpusBits) {
  const int64_t T = 301, E = 8;
  for (const RouterCase& rc : router_cases()) {
    SCOPED_TRACE(rc.name);
    const int64_t k = rc.opt.topk;
    const Tensor logits = tied_logits(T, E, 1);
    Tensor bias;
    if (rc.bias) bias = tied_logits(1, E, 2).view({E});
    Tensor idx = Tensor::empty({T, k}, DType::I32, Device::cpu()), probs = Tensor::empty({T, k}, DType::F32, Device::cpu());
    kernels::topk_router_forward(logits, rc.opt, bias, idx, probs);
    Tensor gidx = Tensor::empty({T, k}, DType::I32, kGpu), gprobs = Tensor::empty({T, k}, DType::F32, kGpu);
    kernels::topk_router_forward(to_device(logits), rc.opt, rc.bias ? to_device(bias) : Tensor(), gidx, gprobs);
    EXPECT_TRUE(same_bits(to_host(gidx), idx));
    EXPECT_TRUE(same_bits(to_host(gprobs), probs));

    const Tensor dprobs = random({T, k}, 3);
    Tensor dlogits = random({T, E}, 4);
    Tensor gdlogits = to_device(dlogits);
    kernels::topk_router_backward(logits, idx, dprobs, rc.opt, dlogits);
    kernels::topk_router_backward(to_device(logits), to_device(idx), to_device(dprobs), rc.opt, gdlogits);
    EXPECT_TRUE(same_bits(to_host(gdlogits), dlogits));
  }
}

// Counts (one group and one per sequence), each token's loss term summed as the CPU sums them, and the
// gradient, for both score functions; the z-loss within rounding.
TEST_F(CudaMoeRouting, AuxAndZLossesMatchTheCpu) {
  const int64_t T = 240, E = 8, k = 2;
  const Tensor logits = tied_logits(T, E, 5), glogits = to_device(logits);
  for (RouterScoreFunction score : {RouterScoreFunction::Softmax, RouterScoreFunction::Sigmoid})
    for (int64_t groups : {int64_t{1}, int64_t{4}}) {
      SCOPED_TRACE(::testing::Message() << (score == RouterScoreFunction::Softmax ? "softmax" : "sigmoid") << ", "
                                        << groups << " groups");
      Tensor counts = Tensor::empty({groups, E}, DType::F32, Device::cpu());
      Tensor gcounts = Tensor::empty({groups, E}, DType::F32, kGpu);
      kernels::aux_loss_counts(logits, k, score, groups, counts);
      kernels::aux_loss_counts(glogits, k, score, groups, gcounts);
      EXPECT_TRUE(same_bits(to_host(gcounts), counts));
      const int64_t per_group = 2 * T / groups;  // as if another rank held as many tokens again
      EXPECT_EQ(kernels::aux_loss_forward(glogits, gcounts, k, score, per_group, 0.1f),
                kernels::aux_loss_forward(logits, counts, k, score, per_group, 0.1f));
      Tensor d = random({T, E}, 6), gd = to_device(d);
      kernels::aux_loss_backward(logits, counts, k, score, per_group, 0.1f, 0.5f, d);
      kernels::aux_loss_backward(glogits, gcounts, k, score, per_group, 0.1f, 0.5f, gd);
      EXPECT_TRUE(same_bits(to_host(gd), d));
    }
  const double z = kernels::z_loss_forward(logits, 0.01f, 2 * T);
  EXPECT_NEAR(kernels::z_loss_forward(glogits, 0.01f, 2 * T), z, 1e-6 * std::fabs(z));
  Tensor d = random({T, E}, 7), gd = to_device(d);
  kernels::z_loss_backward(logits, 0.01f, 2 * T, 0.5f, d);
  kernels::z_loss_backward(glogits, 0.01f, 2 * T, 0.5f, gd);
  EXPECT_TRUE(all_close(to_host(gd), d, 1e-6f, 1e-9f));
}

// The losses' halves that keep the sums on the device (the trainer's step, model LossSums): each term sum
// written to a slot of kernels::loss_totals on the GPU is the sum aux_loss_forward / z_loss_forward copy
// back and add on the host (same order, same doubles), so the value finished from it is theirs bit for bit.
// 5000 tokens: the ordered sum spans several of the kernel's shared-memory chunks.
TEST_F(CudaMoeRouting, TermSumsKeptOnTheDeviceGiveTheLossesBitForBit) {
  const int64_t T = 5000, E = 8, k = 2;
  const Tensor logits = tied_logits(T, E, 8), glogits = to_device(logits);
  for (RouterScoreFunction score : {RouterScoreFunction::Softmax, RouterScoreFunction::Sigmoid})
    for (int64_t groups : {int64_t{1}, int64_t{4}}) {
      SCOPED_TRACE(::testing::Message() << (score == RouterScoreFunction::Softmax ? "softmax" : "sigmoid") << ", "
                                        << groups << " groups");
      Tensor gcounts = Tensor::empty({groups, E}, DType::F32, kGpu);
      kernels::aux_loss_counts(glogits, k, score, groups, gcounts);
      const int64_t per_group = 2 * T / groups;
      const Tensor slots = kernels::loss_totals(4, kGpu);
      kernels::aux_loss_term_sum_to(glogits, gcounts, k, score, per_group, slots.narrow(1, 1));
      kernels::z_loss_term_sum_to(glogits, slots.narrow(3, 1));
      const std::vector<double> v = kernels::loss_totals_values(slots, 4);  // one copy
      EXPECT_EQ(v[0], 0.0);
      EXPECT_EQ(v[2], 0.0);
      EXPECT_EQ(kernels::aux_loss_value(v[1], E, groups, k, per_group, 0.1f),
                kernels::aux_loss_forward(glogits, gcounts, k, score, per_group, 0.1f));
      EXPECT_EQ(kernels::z_loss_value(v[3], 0.01f, 2 * T), kernels::z_loss_forward(glogits, 0.01f, 2 * T));
    }
  // No tokens: the sum, 0, is still written over what the slot held.
  Tensor held = Tensor::empty({1}, DType::I64, Device::cpu());
  const double seven = 7.0;
  std::memcpy(held.raw(), &seven, sizeof seven);
  const Tensor slot = to_device(held);
  kernels::z_loss_term_sum_to(Tensor::empty({0, E}, DType::F32, kGpu), slot);
  EXPECT_EQ(kernels::loss_totals_values(slot, 1)[0], 0.0);
}

// The rows planned from indices and probs on the GPU are the CPU's: dropless, each drop policy with a
// capacity, and padding to it.
TEST_F(CudaMoeRouting, ExpertRowsMatchTheCpu) {
  const int64_t T = 97, E = 8, k = 2;
  TopkRouterOptions opt;
  opt.topk = k;
  Tensor idx = Tensor::empty({T, k}, DType::I32, Device::cpu()), probs = Tensor::empty({T, k}, DType::F32, Device::cpu());
  kernels::topk_router_forward(tied_logits(T, E, 8), opt, Tensor(), idx, probs);
  const Tensor gidx = to_device(idx), gprobs = to_device(probs);
  const int64_t cap = kernels::expert_capacity(T, k, E, 0.75);
  for (auto [capacity, policy, pad] :
       {std::tuple<int64_t, kernels::TokenDropPolicy, bool>{-1, kernels::TokenDropPolicy::Probs, false},
        {cap, kernels::TokenDropPolicy::Probs, false},
        {cap, kernels::TokenDropPolicy::Position, false},
        {cap, kernels::TokenDropPolicy::Probs, true}}) {
    SCOPED_TRACE(::testing::Message() << "capacity " << capacity << " pad " << pad);
    const kernels::ExpertRows want = kernels::expert_rows(idx, probs, E, capacity, policy, pad);
    const kernels::ExpertRows got = kernels::expert_rows(gidx, gprobs, E, capacity, policy, pad);
    EXPECT_EQ(got.counts, want.counts);
    EXPECT_EQ(got.routed, want.routed);
    EXPECT_EQ(got.token.device(), kGpu);
    EXPECT_TRUE(same_bits(to_host(got.token), want.token));
    EXPECT_TRUE(same_bits(to_host(got.slot), want.slot));
    EXPECT_TRUE(same_bits(to_host(got.prob), want.prob));
  }
}

// Gathers, the weighted and unweighted scatter-add (each token's rows summed in ascending order: tokens
// with many rows, rows in no token order) and the row dots.
TEST_F(CudaMoeRouting, TokenRowGathersScattersAndDotsAreTheCpusBits) {
  const int64_t T = 53, h = 37, R = 211;
  const Tensor token = random_ids(R, static_cast<int32_t>(T), 9), gtoken = to_device(token);
  const Tensor x = random({T, h}, 10), rows = random({R, h}, 11), weight = random({R}, 12);
  Tensor out = Tensor::empty({R, h}, DType::F32, Device::cpu()), gout = Tensor::empty({R, h}, DType::F32, kGpu);
  kernels::gather_token_rows(x, token, out);
  kernels::gather_token_rows(to_device(x), gtoken, gout);
  EXPECT_TRUE(same_bits(to_host(gout), out));
  for (bool weighted : {true, false}) {
    SCOPED_TRACE(weighted ? "weighted" : "unweighted");
    Tensor y = random({T, h}, 13), gy = to_device(y);
    kernels::scatter_add_token_rows(rows, token, weighted ? weight : Tensor(), y);
    kernels::scatter_add_token_rows(to_device(rows), gtoken, weighted ? to_device(weight) : Tensor(), gy);
    EXPECT_TRUE(same_bits(to_host(gy), y));
  }
  {  // more tokens than the prefix sum's threads: each sums a chunk of the counts
    const int64_t many = 3001, n = 5003, w = 3;
    const Tensor tok = random_ids(n, static_cast<int32_t>(many), 24), src = random({n, w}, 25);
    Tensor y = random({many, w}, 26), gy = to_device(y);
    kernels::scatter_add_token_rows(src, tok, Tensor(), y);
    kernels::scatter_add_token_rows(to_device(src), to_device(tok), Tensor(), gy);
    EXPECT_TRUE(same_bits(to_host(gy), y));
  }
  Tensor dots = Tensor::empty({R}, DType::F32, Device::cpu()), gdots = Tensor::empty({R}, DType::F32, kGpu);
  kernels::token_row_dots(x, token, rows, dots);
  kernels::token_row_dots(to_device(x), gtoken, to_device(rows), gdots);
  EXPECT_TRUE(same_bits(to_host(gdots), dots));
  // A token outside the tensor is named, as on the CPU.
  const Tensor bad = kernels::from_host(std::vector<int32_t>{0, static_cast<int32_t>(T)}, kGpu);
  Tensor two = Tensor::empty({2, h}, DType::F32, kGpu);
  EXPECT_THROW(kernels::gather_token_rows(to_device(x), bad, two), Error);
}

// The router's input jitter draws dropout's Philox words: the same multipliers on both, for a region
// that is a slice of a longer sequence.
TEST_F(CudaMoeRouting, JitterIsTheCpusBits) {
  kernels::DropoutRegion r;
  r.seq = 7, r.batch = 3, r.hidden = 19, r.seq_total = 20, r.seq_offset = 5, r.sample_offset = 2;
  const Tensor x = random({r.seq * r.batch, r.hidden}, 14);
  Tensor y = Tensor::empty(x.shape(), DType::F32, Device::cpu()), gy = Tensor::empty(x.shape(), DType::F32, kGpu);
  kernels::jitter_multiply(x, y, 0.1f, 77, 5, r);
  kernels::jitter_multiply(to_device(x), gy, 0.1f, 77, 5, r);
  EXPECT_TRUE(same_bits(to_host(gy), y));
}

TEST_F(CudaMoeRouting, CombineScattersAreTheCpusBitsAndTheResidualMixIsClose) {
  const int64_t R = 41, h = 13, T = 17;
  Tensor rows = random({R, h}, 15), grows = to_device(rows);
  const Tensor weight = random({R}, 16);
  kernels::scale_rows(rows, weight);
  kernels::scale_rows(grows, to_device(weight));
  EXPECT_TRUE(same_bits(to_host(grows), rows));
  // Slots: a permutation of some routing entries, -1 for padding rows.
  std::vector<int32_t> slot(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) slot[r] = r % 5 == 4 ? -1 : static_cast<int32_t>((r * 7) % (2 * R));
  const Tensor tslot = kernels::from_host(slot, Device::cpu()), values = random({R}, 17);
  Tensor out = random({R, 2}, 18), gout = to_device(out);
  kernels::scatter_slot_values(values, tslot, out);
  kernels::scatter_slot_values(to_device(values), to_device(tslot), gout);
  EXPECT_TRUE(same_bits(to_host(gout), out));

  const Tensor a = random({T, h}, 19), b = random({T, h}, 20), logits = random({T, 2}, 21, -3.0f, 3.0f);
  Tensor y = Tensor::empty({T, h}, DType::F32, Device::cpu()), gy = Tensor::empty({T, h}, DType::F32, kGpu);
  kernels::two_way_mix_forward(a, b, logits, y);
  kernels::two_way_mix_forward(to_device(a), to_device(b), to_device(logits), gy);
  EXPECT_TRUE(all_close(to_host(gy), y, 1e-6f, 1e-7f));
  const Tensor dy = random({T, h}, 22);
  Tensor da = Tensor::empty({T, h}, DType::F32, Device::cpu()), db = Tensor::empty({T, h}, DType::F32, Device::cpu()),
         dl = Tensor::empty({T, 2}, DType::F32, Device::cpu());
  Tensor gda = Tensor::empty({T, h}, DType::F32, kGpu), gdb = Tensor::empty({T, h}, DType::F32, kGpu),
         gdl = Tensor::empty({T, 2}, DType::F32, kGpu);
  kernels::two_way_mix_backward(a, b, logits, dy, da, db, dl);
  kernels::two_way_mix_backward(to_device(a), to_device(b), to_device(logits), to_device(dy), gda, gdb, gdl);
  EXPECT_TRUE(all_close(to_host(gda), da, 1e-6f, 1e-7f));
  EXPECT_TRUE(all_close(to_host(gdb), db, 1e-6f, 1e-7f));
  EXPECT_TRUE(all_close(to_host(gdl), dl, 1e-5f, 1e-7f));
}

// The experts' layers, one cuBLASLt product per expert, against the CPU's batched GEMM; the padding of
// uneven experts' rows is copies (bit for bit).
TEST_F(CudaMoeRouting, GroupedLinearAndRowPaddingMatchTheCpu) {
  const std::vector<int64_t> counts = {5, 0, 9, 3};
  const int64_t groups = 4, rows = 9, in = 12, out = 7, total = 17;
  const Tensor x = random({total, in}, 23);
  const Tensor padded = kernels::pad_row_groups(x, counts, rows);
  const Tensor gpadded = kernels::pad_row_groups(to_device(x), counts, rows);
  EXPECT_EQ(gpadded.device(), kGpu);
  EXPECT_TRUE(same_bits(to_host(gpadded), padded));
  Tensor back = Tensor::empty({total, in}, DType::F32, kGpu);
  kernels::unpad_row_groups(gpadded, counts, back);
  EXPECT_TRUE(same_bits(to_host(back), x));

  std::vector<Tensor> w, b, dw, db, gw, gb, gdw, gdb;
  for (int64_t g = 0; g < groups; ++g) {
    w.push_back(random({out, in}, 30 + g));
    b.push_back(random({out}, 40 + g));
    dw.push_back(random({out, in}, 50 + g));
    db.push_back(random({out}, 60 + g));
    gw.push_back(to_device(w.back()));
    gb.push_back(to_device(b.back()));
    gdw.push_back(to_device(dw.back()));
    gdb.push_back(to_device(db.back()));
  }
  Tensor y = Tensor::empty({groups, rows, out}, DType::F32, Device::cpu()),
         gy = Tensor::empty({groups, rows, out}, DType::F32, kGpu);
  kernels::grouped_linear_forward(padded, w, b, y);
  kernels::grouped_linear_forward(gpadded, gw, gb, gy);
  EXPECT_TRUE(all_close(to_host(gy), y, 1e-5f, 1e-5f));
  const Tensor dy = random({groups, rows, out}, 70);
  Tensor dx = Tensor::empty({groups, rows, in}, DType::F32, Device::cpu()),
         gdx = Tensor::empty({groups, rows, in}, DType::F32, kGpu);
  kernels::grouped_linear_backward(dy, padded, w, dx, dw, db);
  kernels::grouped_linear_backward(to_device(dy), gpadded, gw, gdx, gdw, gdb);
  EXPECT_TRUE(all_close(to_host(gdx), dx, 1e-5f, 1e-5f));
  for (int64_t g = 0; g < groups; ++g) {
    EXPECT_TRUE(all_close(to_host(gdw[g]), dw[g], 1e-5f, 1e-5f)) << "dw " << g;
    EXPECT_TRUE(all_close(to_host(gdb[g]), db[g], 1e-5f, 1e-5f)) << "db " << g;
  }
}

}  // namespace
}  // namespace tessera::cuda
