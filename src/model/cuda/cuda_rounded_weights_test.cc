// The parameter set's rounded-weight cache on a GPU (model::ParameterSet::rounded_value): under
// --bf16/--fp16 each GEMM weight's copy is a 16-bit tensor (2 bytes an element, counted so), cast once
// per step from the fp32 master weight and holding bit for bit the CPU's rounding of it; with the 16-bit
// GEMM buffers switched off (kernels::gpu_16bit_gemm_buffers) the step-1 fp32 copy. And the saved
// activations that backward reads only as GEMM inputs (model::SavedTensors::visit_gemm_inputs), kept in
// bf16 for backward there. Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/cuda/device_testing.h"
#include "kernels/precision.h"
#include "kernels/tensor_ops.h"
#include "model/parameters.h"
#include "model/saved_tensors.h"

namespace tessera::model {
namespace {

using cuda::testing::kGpu;
using cuda::testing::random;
using cuda::testing::same_bits;
using cuda::testing::to_host;

class CudaRoundedWeights : public cuda::testing::CudaKernelTest {
 protected:
  void TearDown() override { kernels::set_gpu_16bit_gemm_buffers(true); }
};

// A weight read by GEMMs and a bias that is not, on the GPU, with copies kept for t.
struct Params {
  ParameterSet set;
  Parameter* weight = nullptr;
  Parameter* bias = nullptr;
};
void make(Params& p, DType t) {
  DefaultDeviceScope scope(kGpu);
  ParameterSpec w{"layer.weight", {37, 29}, Init::Normal, 0.5f};
  w.gemm_weight = true;
  p.weight = p.set.add(w);
  p.bias = p.set.add({"layer.bias", {37}, Init::Zeros});
  p.set.allocate(7);
  p.set.cache_rounded_weights(t);
}

// The CPU's rounding of the GPU weight's current values.
Tensor cpu_rounding(DType t, const Tensor& gpu_value) {
  const Tensor host = to_host(gpu_value);
  Tensor want = Tensor::empty(host.shape(), DType::F32, Device::cpu());
  kernels::round_to(t, host, want);
  return want;
}

TEST_F(CudaRoundedWeights, CopiesAre16BitCastOncePerStepAsTheCpuRounds) {
  for (DType t : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(t));
    Params p;
    make(p, t);
    const Tensor first = p.set.rounded_value(*p.weight, t);
    ASSERT_TRUE(first.defined());
    EXPECT_EQ(first.dtype(), t);
    EXPECT_EQ(first.device(), kGpu);
    EXPECT_EQ(first.shape(), p.weight->value.shape());
    EXPECT_TRUE(same_bits(to_host(kernels::to_fp32(first)), cpu_rounding(t, p.weight->value)));
    // Counted as kept: 2 bytes an element, what the trainer's prediction says.
    EXPECT_EQ(p.set.rounded_weight_bytes(), 37 * 29 * 2);
    EXPECT_EQ(p.set.rounded_weight_bytes(), p.set.gemm_weight_bytes(kernels::gemm_buffer_type(t, kGpu)));
    // No cast again within the step: the same tensor.
    EXPECT_EQ(p.set.rounded_value(*p.weight, t).raw(), first.raw());

    // An "optimizer step": new fp32 values, announced; the next use casts them.
    kernels::transfer(p.weight->value, random({37, 29}, 3));
    p.set.weights_changed();
    const Tensor second = p.set.rounded_value(*p.weight, t);
    EXPECT_EQ(second.dtype(), t);
    EXPECT_TRUE(same_bits(to_host(kernels::to_fp32(second)), cpu_rounding(t, p.weight->value)));
  }
}

// Switched to the fp32-buffer path, the copy is fp32 again (4 bytes an element), the same values.
TEST_F(CudaRoundedWeights, Fp32BufferPathKeepsFp32Copies) {
  Params p;
  make(p, DType::BF16);
  const Tensor bf16 = p.set.rounded_value(*p.weight, DType::BF16);
  kernels::set_gpu_16bit_gemm_buffers(false);
  const Tensor fp32 = p.set.rounded_value(*p.weight, DType::BF16);
  EXPECT_EQ(fp32.dtype(), DType::F32);
  EXPECT_EQ(p.set.rounded_weight_bytes(), 37 * 29 * 4);
  EXPECT_TRUE(same_bits(to_host(fp32), to_host(kernels::to_fp32(bf16))));
}

// A kept activation that backward reads only as a GEMM input stays in 16 bits for backward on the GPU
// (the forward's encoding is the dW product's input), the others are widened; with the fp32-buffer path
// every one is widened, as on the CPU.
struct Record final : SavedTensors {
  Tensor gemm_only, other;
  void visit(const std::function<void(Tensor&, bool)>& f) override {
    f(gemm_only, true);
    f(other, true);
  }
  void visit_gemm_inputs(const std::function<void(Tensor&)>& f) override { f(gemm_only); }
};

TEST_F(CudaRoundedWeights, GemmOnlyActivationsStay16BitForBackward) {
  for (bool sixteen : {true, false}) {
    SCOPED_TRACE(sixteen);
    kernels::set_gpu_16bit_gemm_buffers(sixteen);
    Record r;
    const Tensor a = random({41}, 4), b = random({41}, 5);
    r.gemm_only = cuda::testing::to_device(a), r.other = cuda::testing::to_device(b);
    r.store_activations_as(DType::BF16);
    EXPECT_EQ(r.widen_activations(), DType::BF16);
    EXPECT_EQ(r.gemm_only.dtype(), sixteen ? DType::BF16 : DType::F32);
    EXPECT_EQ(r.other.dtype(), DType::F32);
    Tensor want = Tensor::empty({41}, DType::F32, Device::cpu());
    kernels::round_to(DType::BF16, a, want);
    EXPECT_TRUE(same_bits(to_host(kernels::to_fp32(r.gemm_only)), want));
  }
}

}  // namespace
}  // namespace tessera::model
