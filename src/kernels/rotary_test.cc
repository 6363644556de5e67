#include "kernels/cpu/rotary.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/philox.h"
#include "core/testing.h"

namespace tessera::kernels {
namespace {

// The CPU implementations over host buffers (kernels/cpu/), beside the tensor entry points.
using namespace cpu;

using testing::max_scaled_error;
using testing::numeric_gradient;
using testing::random_vector;
using testing::to_double;
using Vec = std::vector<double>;

constexpr float kBase = 10000.0f;

struct Shape {
  int64_t rows, heads, head_dim, rot_dim;
  std::string str() const {
    return std::to_string(rows) + "x" + std::to_string(heads) + "x" + std::to_string(head_dim) + " rot " +
           std::to_string(rot_dim);
  }
  int64_t numel() const { return rows * heads * head_dim; }
};
// Full and partial rotation (--rotary-percent < 1), half not a multiple of the vector width.
const Shape kShapes[] = {{1, 1, 2, 2}, {3, 2, 8, 8}, {4, 3, 64, 32}, {2, 1, 10, 6}, {3, 2, 66, 66}, {2, 4, 128, 128}};

// Positions in [0, 4096), the first one 0.
std::vector<int32_t> random_positions(int64_t rows, uint64_t seed) {
  PhiloxStream s(seed, 1);
  std::vector<int32_t> p(rows);
  for (int64_t r = 0; r < rows; ++r) p[r] = r == 0 ? 0 : static_cast<int32_t>(s.bits(r) % 4096);
  return p;
}

// float64 reference: rotation by sign * angle.
Vec rope_ref(Vec x, const std::vector<int32_t>& pos, const Shape& s, double sign = 1) {
  const int64_t half = s.rot_dim / 2;
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        double angle = pos[r] * std::pow(double{kBase}, -2.0 * i / s.rot_dim);
        double c = std::cos(angle), sn = sign * std::sin(angle);
        double* v = &x[(r * s.heads + h) * s.head_dim];
        double a = v[i], b = v[i + half];
        v[i] = a * c - b * sn;
        v[i + half] = b * c + a * sn;
      }
  return x;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// The gradient of L = sum(rope(x) * R) is the inverse rotation of R.
TEST(RotaryReference, BackwardMatchesFiniteDifferences) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.str());
    if (s.numel() > 1000) continue;  // O(n^2) finite differences
    auto pos = random_positions(s.rows, 1);
    Vec x = to_double(random_vector(s.numel(), 2)), R = to_double(random_vector(s.numel(), 3));
    Vec g = numeric_gradient([&](const Vec& v) { return dot(rope_ref(v, pos, s), R); }, x);
    EXPECT_LE(max_scaled_error(rope_ref(R, pos, s, -1), g, 1e-7, 1e-6), 1.0);
  }
}

TEST(Rotary, MatchesReference) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.str());
    auto pos = random_positions(s.rows, 4);
    auto x = random_vector(s.numel(), 5);
    auto y = x;
    rope_forward(y.data(), pos.data(), s.rows, s.heads, s.head_dim, s.rot_dim, kBase);
    EXPECT_LE(max_scaled_error(y, rope_ref(to_double(x), pos, s), 1e-6, 1e-5), 1.0);

    auto dx = x;
    rope_backward(dx.data(), pos.data(), s.rows, s.heads, s.head_dim, s.rot_dim, kBase);
    EXPECT_LE(max_scaled_error(dx, rope_ref(to_double(x), pos, s, -1), 1e-6, 1e-5), 1.0);

    // The inverse undoes the rotation.
    rope_backward(y.data(), pos.data(), s.rows, s.heads, s.head_dim, s.rot_dim, kBase);
    EXPECT_LE(max_scaled_error(y, x, 1e-6, 1e-6), 1.0);
  }
}

TEST(Rotary, RotatesPairsAndLeavesTheRestAlone) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.str());
    auto pos = random_positions(s.rows, 6);
    auto x = random_vector(s.numel(), 7);
    auto y = x;
    rope_forward(y.data(), pos.data(), s.rows, s.heads, s.head_dim, s.rot_dim, kBase);
    const int64_t half = s.rot_dim / 2;
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t o = (r * s.heads + h) * s.head_dim;
        for (int64_t i = 0; i < half; ++i) {
          // Each (i, i + half) pair is rotated: its norm is preserved.
          double before = double{x[o + i]} * x[o + i] + double{x[o + i + half]} * x[o + i + half];
          double after = double{y[o + i]} * y[o + i] + double{y[o + i + half]} * y[o + i + half];
          EXPECT_NEAR(after, before, 1e-6 * (1 + before));
        }
        // Position 0 is the identity; dimensions past rot_dim pass through; both exactly.
        for (int64_t i = pos[r] == 0 ? 0 : s.rot_dim; i < s.head_dim; ++i) ASSERT_EQ(y[o + i], x[o + i]);
      }
  }
}

// Linear scaling by 2 at position 2p is the unscaled rotation at p.
TEST(Rotary, LinearScalingDividesThePositions) {
  const Shape s{5, 2, 8, 8};
  std::vector<int32_t> pos = random_positions(s.rows, 8), doubled(pos);
  for (int32_t& p : doubled) p *= 2;
  const auto x = random_vector(s.numel(), 9);
  auto y = x, y_scaled = x;
  rope_forward(y.data(), pos.data(), s.rows, s.heads, s.head_dim, s.rot_dim, kBase);
  math::RopeScaling linear{math::RopeScalingType::kLinear, 2.0};
  rope_forward(y_scaled.data(), doubled.data(), s.rows, s.heads, s.head_dim, s.rot_dim, kBase, linear);
  EXPECT_LE(max_scaled_error(y_scaled, to_double(y), 1e-6, 1e-5), 1.0);
}

// Llama 3.1's frequencies (base 500000, head 128, factor 8, original context 8192), as the published
// reference writes them (per wavelength band), against the shared math: the highest frequency is kept,
// the lowest divided by 8 and one in the band interpolated.
TEST(Rotary, Llama3ScalingBands) {
  const math::RopeScaling llama3{math::RopeScalingType::kLlama3, 8.0, 1.0, 4.0, 8192.0};
  int kept = 0, divided = 0, smoothed = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const double f = std::pow(500000.0, -2.0 * i / 128.0), wavelen = 2 * M_PI / f;
    double want = f;
    if (wavelen > 8192.0) {
      want = f / 8, ++divided;
    } else if (wavelen >= 8192.0 / 4) {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * f / 8 + smooth * f, ++smoothed;
    } else {
      ++kept;
    }
    EXPECT_NEAR(math::rope_inv_freq(i, 128, 500000.0f, llama3), want, 1e-12 * f) << "pair " << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
}

TEST(Rotary, RejectsBadRotDim) {
  std::vector<float> x(8);
  std::vector<int32_t> pos(1);
  EXPECT_THROW(rope_forward(x.data(), pos.data(), 1, 1, 8, 7, kBase), Error);   // odd
  EXPECT_THROW(rope_forward(x.data(), pos.data(), 1, 1, 8, 10, kBase), Error);  // > head_dim
}

}  // namespace
}  // namespace tessera::kernels
