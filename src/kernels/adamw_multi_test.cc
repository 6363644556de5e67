// The one-launch optimizer kernels' CPU counterparts (kernels/adamw.h): the gradient norm in the GPU's
// blocked order against an extended-precision sum, with the step's clip factor as the optimizer's host
// formula makes it; the multi-tensor AdamW over a segment table against one adamw_step per segment, bit for bit; an
// overflowed norm skipping the step; a table outside its buffers refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"
#include "core/testing.h"
#include "kernels/adamw.h"
#include "kernels/math/adamw.h"

namespace tessera::kernels {
namespace {

Tensor random(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty({n});
  auto v = testing::random_vector(static_cast<size_t>(n), seed, lo, hi);
  if (n > 0) std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

Tensor scalars() { return Tensor::zeros({kStepScalarWords}, DType::I64); }

TEST(GradNormAndClip, SumOfSquaresMatchesAnExtendedSumAndTheClipFactorTheHostFormula) {
  for (int64_t n : {0, 1, 255, 8192, 8193, 300001}) {
    SCOPED_TRACE(n);
    const Tensor x = random(n, 1, -3.0f, 3.0f);
    long double exact = 0;  // 64-bit mantissa: the reference's own rounding far below the tolerance
    for (int64_t i = 0; i < n; ++i) exact += static_cast<long double>(x.f32()[i]) * x.f32()[i];
    const double want = static_cast<double>(exact);
    for (float loss_scale : {1.0f, 1024.0f}) {
      const Tensor s = scalars();
      grad_norm_and_clip(x, s, 1.0f, loss_scale);
      const StepScalars got = read_step_scalars(s);
      EXPECT_NEAR(got.sum_of_squares, want, 1e-14 * want);
      EXPECT_EQ(got.grad_norm, std::sqrt(got.sum_of_squares) / loss_scale);
      // optim::clip_factor's formula (optim/optimizer.h), then the unscaling.
      const double coeff = 1.0 / (got.grad_norm + 1e-6);
      const float clip = coeff < 1.0 ? static_cast<float>(coeff) : 1.0f;
      EXPECT_EQ(got.clip_scale, clip / loss_scale);
      EXPECT_EQ(read_step_scalars(s).sum_of_squares, got.sum_of_squares);  // and again the same bits
    }
  }
}

TEST(GradNormAndClip, ClippingOffGivesOneAndANonFiniteNormGivesNan) {
  Tensor x = random(10000, 2);
  Tensor s = scalars();
  grad_norm_and_clip(x, s, 0.0f, 1.0f);
  EXPECT_EQ(read_step_scalars(s).clip_scale, 1.0f);
  x.f32()[9000] = std::numeric_limits<float>::infinity();
  grad_norm_and_clip(x, s, 1.0f, 1.0f);
  EXPECT_TRUE(std::isinf(read_step_scalars(s).grad_norm));
  EXPECT_TRUE(std::isnan(read_step_scalars(s).clip_scale));
}

struct Buffers {
  Tensor p, g, m, v;
};
Buffers random_buffers(int64_t params, int64_t state) {
  return {random(params, 3), random(params, 4, -0.1f, 0.1f), random(state, 5, -0.01f, 0.01f),
          random(state, 6, 0.0f, 1e-4f)};
}
Buffers clone(const Buffers& b) { return {b.p.clone(), b.g.clone(), b.m.clone(), b.v.clone()}; }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Segments with a gap (an untrained parameter), moments at other offsets than the parameters (a
// distributed optimizer's shard), one not decayed, one longer than a chunk of the CPU's tasks.
const std::vector<AdamWSegment> kSegments = {{0, 100, 0, true}, {150, 7, 100, false}, {157, 20000, 107, true},
                                             {20157, 1, 20107, false}};

TEST(AdamWMultiStep, EqualsOneAdamWStepPerSegmentBitForBit) {
  const int64_t params = 20200, state = 20108;
  const Buffers start = random_buffers(params, state);
  const AdamWSegmentTable table = adamw_segment_table(kSegments, params, state, Device::cpu());
  EXPECT_EQ(table.total, 100 + 7 + 20000 + 1);
  const Tensor s = scalars();
  grad_norm_and_clip(start.g, s, 0.5f, 1.0f);  // clips: the norm is ~8
  const float clip = read_step_scalars(s).clip_scale;
  ASSERT_LT(clip, 1.0f);
  AdamWHyper h{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 1.0f};
  const Buffers multi = clone(start);
  adamw_multi_step(multi.p, multi.g, multi.m, multi.v, table, h, s);
  const Buffers each = clone(start);
  for (const AdamWSegment& seg : kSegments) {
    AdamWHyper hs = h;
    hs.weight_decay = seg.decay ? h.weight_decay : 0.0f;
    hs.grad_scale = clip;
    adamw_step(each.p.flat_range(seg.begin, seg.length), each.g.flat_range(seg.begin, seg.length),
               each.m.flat_range(seg.state, seg.length), each.v.flat_range(seg.state, seg.length), hs);
  }
  EXPECT_TRUE(same_bits(multi.p, each.p));
  EXPECT_TRUE(same_bits(multi.m, each.m));
  EXPECT_TRUE(same_bits(multi.v, each.v));
  EXPECT_FALSE(same_bits(multi.p, start.p));  // it stepped
  EXPECT_EQ(multi.p.f32()[120], start.p.f32()[120]);  // the gap did not
}

TEST(AdamWMultiStep, ANonFiniteNormChangesNothing) {
  const int64_t params = 20200, state = 20108;
  Buffers b = random_buffers(params, state);
  b.g.f32()[5] = std::numeric_limits<float>::quiet_NaN();
  const Buffers start = clone(b);
  const Tensor s = scalars();
  grad_norm_and_clip(b.g, s, 1.0f, 1.0f);
  adamw_multi_step(b.p, b.g, b.m, b.v, adamw_segment_table(kSegments, params, state, Device::cpu()),
                   AdamWHyper{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f}, s);
  EXPECT_TRUE(same_bits(b.p, start.p));
  EXPECT_TRUE(same_bits(b.m, start.m));
}

TEST(AdamWMultiStep, ATableOutsideItsBuffersIsRefusedNamingTheSegment) {
  try {
    adamw_segment_table({{0, 10, 0, true}, {10, 95, 10, true}}, 100, 200, Device::cpu());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("segment 1"), std::string::npos) << e.what();
  }
  const AdamWSegmentTable table = adamw_segment_table({{0, 10, 0, true}}, 10, 10, Device::cpu());
  const Buffers b = random_buffers(20, 10);
  EXPECT_THROW(adamw_multi_step(b.p, b.g, b.m, b.v, table, AdamWHyper{}, scalars()), Error);
}

}  // namespace
}  // namespace tessera::kernels
