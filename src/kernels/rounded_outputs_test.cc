// Kernels that write their output already rounded for the GEMMs it feeds (mixed precision) give
// bitwise their fp32 output rounded afterwards, and linear_backward's reuse of rounded inputs gives
// bitwise the gradients of rounding in every GEMM.
#include <gtest/gtest.h>

#include <vector>

#include "core/testing.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norms.h"
#include "kernels/precision.h"

namespace tessera::kernels {
namespace {

// The CPU implementations over host buffers (kernels/cpu/), beside the tensor entry points.
using namespace cpu;

using testing::random_vector;

// `produce(out, t)` writes a kernel's output rounded to t (F32: not rounded). Checks that the rounded
// output is the fp32 one rounded, and that the rounding changed something.
template <typename Produce>
void expect_rounded_output(const char* what, int64_t n, const Produce& produce) {
  std::vector<float> fp32(n);
  produce(fp32.data(), DType::F32);
  for (DType t : {DType::BF16, DType::F16}) {
    std::vector<float> rounded(n), expected(n);
    produce(rounded.data(), t);
    round_to(t, fp32.data(), expected.data(), n);
    EXPECT_EQ(rounded, expected) << what << " " << dtype_name(t);
    EXPECT_NE(rounded, fp32) << what << " " << dtype_name(t) << ": nothing was rounded";
  }
}

TEST(RoundedOutputs, NormsActivationsAndCrossEntropyRoundWhatTheyWrite) {
  const int64_t rows = 37, cols = 100, vocab = 9000;  // more than one piece of GELU and of the vocabulary
  auto x = random_vector(rows * cols, 1), w = random_vector(cols, 2), b = random_vector(cols, 3);
  std::vector<float> mean(rows), rstd(rows);
  expect_rounded_output("layernorm", rows * cols, [&](float* y, DType t) {
    layernorm_forward(x.data(), w.data(), b.data(), y, mean.data(), rstd.data(), rows, cols, 1e-5f, t);
  });
  expect_rounded_output("rmsnorm", rows * cols, [&](float* y, DType t) {
    rmsnorm_forward(x.data(), w.data(), y, rstd.data(), rows, cols, 1e-5f, t);
  });
  auto big = random_vector(3 * 4096 + 17, 4, -4.0f, 4.0f);
  expect_rounded_output("gelu", static_cast<int64_t>(big.size()),
                        [&](float* y, DType t) { gelu_forward(big.data(), y, static_cast<int64_t>(big.size()), t); });
  expect_rounded_output("swiglu", rows * cols / 2,
                        [&](float* y, DType t) { swiglu_forward(x.data(), y, rows, cols / 2, t); });
  auto logits = random_vector(4 * vocab, 5, -3.0f, 3.0f);
  std::vector<int32_t> targets = {0, 17, 4500, 8999};
  std::vector<float> loss(4), lse(4), dloss = {1.0f, 0.5f, 0.0f, 2.0f};
  cross_entropy_forward(logits.data(), targets.data(), loss.data(), lse.data(), 4, vocab);
  expect_rounded_output("cross_entropy_backward", 4 * vocab, [&](float* d, DType t) {
    std::copy(logits.begin(), logits.end(), d);
    cross_entropy_backward(d, targets.data(), lse.data(), dloss.data(), 4, vocab, 0, t);
  });
}

// dy rounded once (in the bias gradient's pass, or on its own without a bias) for both GEMMs, and
// inputs marked as rounded used in place: bitwise the gradients of rounding everything in each GEMM.
TEST(RoundedOutputs, LinearBackwardReuseIsBitwiseTheRoundingInEveryGemm) {
  const int64_t rows = 33, in = 48, out = 70;
  auto dy = random_vector(rows * out, 6), x = random_vector(rows * in, 7), w = random_vector(out * in, 8);
  for (DType t : {DType::BF16, DType::F16}) {
    std::vector<float> xr(x.size()), wr(w.size());
    round_to(t, x.data(), xr.data(), rows * in);
    round_to(t, w.data(), wr.data(), out * in);
    for (bool bias : {true, false}) {
      auto run = [&](bool reuse) {
        set_reuse_rounded_inputs(reuse);
        std::vector<float> dx(rows * in), dw(out * in, 0.25f), db(out, 0.5f);
        linear_backward(dy.data(), xr.data(), wr.data(), dx.data(), dw.data(), bias ? db.data() : nullptr, rows, in,
                        out, false, t, true, true);
        set_reuse_rounded_inputs(true);
        dx.insert(dx.end(), dw.begin(), dw.end());
        dx.insert(dx.end(), db.begin(), db.end());
        return dx;
      };
      EXPECT_EQ(run(true), run(false)) << dtype_name(t) << " bias " << bias;
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
