// SavedTensors' 16-bit storage on the CPU: every kept activation is stored in the 16-bit type and
// widened back to the same fp32 values for backward, GEMM-only inputs included (the CPU's GEMMs read
// fp32 buffers, kernels::gemm_buffer_type); statistics stay fp32 throughout. The GPU's side (GEMM-only
// inputs kept in 16 bits for backward) is model/cuda/cuda_rounded_weights_test.cc and, for a whole model,
// model/cuda/cuda_gpt_model_test.cc.
#include "model/saved_tensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/testing.h"
#include "kernels/precision.h"
#include "model/modules.h"
#include "model/transformer_layer.h"

namespace tessera::model {
namespace {

// An activation read in backward only by a GEMM, another that is not, and a statistic.
struct Record final : SavedTensors {
  Tensor gemm_only, other, stat;
  void visit(const std::function<void(Tensor&, bool)>& f) override {
    f(gemm_only, true);
    f(other, true);
    f(stat, false);
  }
  void visit_gemm_inputs(const std::function<void(Tensor&)>& f) override { f(gemm_only); }
};

Tensor random(int64_t n, uint64_t seed) {
  Tensor t = Tensor::empty({n}, DType::F32, Device::cpu());
  const auto v = tessera::testing::random_vector(static_cast<size_t>(n), seed);
  std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(SavedTensors, OnTheCpuEveryActivationIsWidenedForBackward) {
  for (DType t : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(t));
    Record r;
    r.gemm_only = random(37, 1), r.other = random(37, 2), r.stat = random(5, 3);
    const Tensor stat = r.stat.clone();
    Tensor want = Tensor::empty({37}, DType::F32, Device::cpu()), want_other = want.clone();
    kernels::round_to(t, r.gemm_only, want);
    kernels::round_to(t, r.other, want_other);
    r.store_activations_as(t);
    EXPECT_EQ(r.gemm_only.dtype(), t);
    EXPECT_EQ(r.other.dtype(), t);
    EXPECT_EQ(r.bytes(), 37 * 2 * 2 + 5 * 4);
    EXPECT_EQ(r.widen_activations(), t);
    EXPECT_TRUE(same_bits(r.gemm_only, want));
    EXPECT_TRUE(same_bits(r.other, want_other));
    EXPECT_TRUE(same_bits(r.stat, stat));
  }
}

// A layer's record lists its norms' outputs as GEMM inputs when forward said its slots read them only
// through linear layers (pre-LN, Sublayer::takes_16bit_input), after its slots' own; on the CPU every one
// is still widened to the same values for backward, so the CPU's arithmetic is unchanged.
TEST(SavedTensors, ALayerListsTheNormOutputsItsSlotsReadOnlyAsGemmInputs) {
  for (bool ln1 : {false, true}) {
    for (bool ln2 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << ln1 << ln2);
      LayerRecord r;
      r.mlp = std::make_unique<Record>();
      auto& mlp = static_cast<Record&>(*r.mlp);
      r.input = random(37, 1), r.ln1 = random(37, 2), r.residual = random(37, 3), r.ln2 = random(37, 4);
      mlp.gemm_only = random(37, 5), mlp.other = random(37, 6), mlp.stat = random(5, 7);
      r.ln1_gemm_input = ln1, r.ln2_gemm_input = ln2;
      std::vector<const Tensor*> listed;
      r.visit_gemm_inputs([&](Tensor& t) { listed.push_back(&t); });
      std::vector<const Tensor*> want;
      if (ln1) want.push_back(&r.ln1);
      if (ln2) want.push_back(&r.ln2);
      want.push_back(&mlp.gemm_only);
      EXPECT_EQ(listed, want);

      Tensor ln1_want = Tensor::empty({37}, DType::F32, Device::cpu());
      kernels::round_to(DType::BF16, r.ln1, ln1_want);
      r.store_activations_as(DType::BF16);
      EXPECT_EQ(r.ln1.dtype(), DType::BF16);
      EXPECT_EQ(r.widen_activations(), DType::BF16);
      for (const Tensor* t : {&r.input, &r.ln1, &r.residual, &r.ln2, &mlp.gemm_only, &mlp.other})
        EXPECT_EQ(t->dtype(), DType::F32);
      EXPECT_TRUE(same_bits(r.ln1, ln1_want));
    }
  }
}

// The attention output made a GEMM input on the CPU: rounded in place (fp32, the CPU's GEMM buffers)
// where inputs are reused under mixed precision, untouched in fp32 or with reuse off; only a GPU replaces
// it by its 16-bit encoding (model/cuda/cuda_gpt_model_test.cc).
TEST(SavedTensors, AGemmInputIsRoundedInPlaceOnTheCpu) {
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (bool reuse : {true, false}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " reuse " << reuse);
      kernels::set_reuse_rounded_inputs(reuse);
      const Tensor x0 = random(41, 8);
      Tensor x = x0.clone(), want = Tensor::empty({41}, DType::F32, Device::cpu());
      const bool rounds = t != DType::F32 && reuse;
      kernels::round_to(rounds ? t : DType::F32, x0, want);
      const void* storage = x.raw();
      EXPECT_EQ(make_gemm_input(t, x), rounds);
      EXPECT_EQ(x.raw(), storage);  // in place
      EXPECT_TRUE(same_bits(x, want));
    }
  }
  kernels::set_reuse_rounded_inputs(true);
}

}  // namespace
}  // namespace tessera::model
