// SavedTensors' 16-bit storage on the CPU: every kept activation is stored in the 16-bit type and
// widened back to the same fp32 values for backward, GEMM-only inputs included (the CPU's GEMMs read
// fp32 buffers, kernels::gemm_buffer_type); statistics stay fp32 throughout. The GPU's side (GEMM-only
// inputs kept in 16 bits for backward) is model/cuda/cuda_rounded_weights_test.cc.
#include "model/saved_tensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/testing.h"
#include "kernels/precision.h"

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

}  // namespace
}  // namespace tessera::model
