#include "kernels/cpu/dropout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/philox.h"
#include "core/testing.h"

namespace tessera::kernels {
namespace {

// The CPU implementations over host buffers (kernels/cpu/), beside the tensor entry points.
using namespace cpu;

constexpr uint64_t kSeed = 1234, kStream = 77;

// float64 reference: y = x / (1 - p) where the global element's uniform is >= p, else 0.
std::vector<double> reference(const std::vector<float>& x, float p, const DropoutRegion& r) {
  PhiloxStream rng(kSeed, kStream);
  std::vector<double> y(x.size());
  for (int64_t s = 0; s < r.seq; ++s)
    for (int64_t b = 0; b < r.batch; ++b)
      for (int64_t h = 0; h < r.hidden; ++h) {
        int64_t local = (s * r.batch + b) * r.hidden + h;
        int64_t global = ((r.sample_offset + b) * r.seq_total + r.seq_offset + s) * r.hidden + h;
        bool keep = rng.uniform(static_cast<uint64_t>(global)) >= p;
        y[local] = keep ? x[local] / (1.0 - p) : 0.0;
      }
  return y;
}

int64_t numel(const DropoutRegion& r) { return r.seq * r.batch * r.hidden; }

// Odd hidden sizes make rows start mid-Philox-block; 2500 spans several column chunks.
TEST(Dropout, MatchesPhiloxReference) {
  for (int64_t hidden : {1, 3, 37, 2500}) {
    DropoutRegion r{.seq = 5, .batch = 3, .hidden = hidden, .seq_offset = 2, .seq_total = 9, .sample_offset = 1};
    std::vector<float> x = testing::random_vector(numel(r), 1), y(x.size());
    dropout_forward(x.data(), y.data(), 0.3f, kSeed, kStream, r);
    EXPECT_LE(testing::max_scaled_error(y, reference(x, 0.3f, r), 1e-7, 1e-6), 1.0) << "hidden " << hidden;
  }
}

TEST(Dropout, KeepsOneMinusPAndScales) {
  DropoutRegion r{.seq = 256, .batch = 4, .hidden = 1024, .seq_offset = 0, .seq_total = 256, .sample_offset = 0};
  std::vector<float> x(numel(r), 1.0f), y(x.size());
  for (float p : {0.1f, 0.5f}) {
    dropout_forward(x.data(), y.data(), p, kSeed, kStream, r);
    int64_t kept = 0;
    for (float v : y) {
      if (v != 0.0f) {
        ++kept;
        EXPECT_NEAR(v, 1.0 / (1.0 - p), 1e-6);
      }
    }
    // 1M Bernoulli draws: the standard deviation of the fraction is <= 5e-4.
    EXPECT_NEAR(static_cast<double>(kept) / numel(r), 1.0 - p, 3e-3) << "p " << p;
  }
}

TEST(Dropout, BackwardUsesTheForwardMask) {
  DropoutRegion r{.seq = 7, .batch = 2, .hidden = 50, .seq_offset = 3, .seq_total = 16, .sample_offset = 2};
  std::vector<float> x = testing::random_vector(numel(r), 2, 0.5f, 1.5f), y(x.size());
  std::vector<float> dy = testing::random_vector(numel(r), 3, 0.5f, 1.5f), dx(x.size());
  dropout_forward(x.data(), y.data(), 0.4f, kSeed, kStream, r);
  dropout_backward(dy.data(), dx.data(), 0.4f, kSeed, kStream, r);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i] != 0.0f, dx[i] != 0.0f) << i;
    if (dx[i] != 0.0f) {
      EXPECT_NEAR(dx[i], dy[i] / 0.6, 1e-6);
    }
  }
}

// A layout shard (sequence-parallel rows, data-parallel samples) draws exactly the mask that the
// corresponding slice of the full [seq_total, samples, hidden] tensor draws.
TEST(Dropout, ShardEqualsSliceOfFullTensor) {
  const int64_t seq_total = 12, samples = 4, hidden = 30;
  DropoutRegion full{.seq = seq_total, .batch = samples, .hidden = hidden, .seq_offset = 0,
                     .seq_total = seq_total, .sample_offset = 0};
  std::vector<float> x = testing::random_vector(numel(full), 4), y(x.size());
  dropout_forward(x.data(), y.data(), 0.25f, kSeed, kStream, full);

  DropoutRegion part{.seq = 5, .batch = 2, .hidden = hidden, .seq_offset = 6, .seq_total = seq_total,
                     .sample_offset = 1};
  auto full_index = [&](int64_t s, int64_t b, int64_t h) {
    return ((part.seq_offset + s) * samples + part.sample_offset + b) * hidden + h;
  };
  std::vector<float> xs(numel(part)), ys(xs.size());
  for (int64_t s = 0; s < part.seq; ++s)
    for (int64_t b = 0; b < part.batch; ++b)
      for (int64_t h = 0; h < hidden; ++h) xs[(s * part.batch + b) * hidden + h] = x[full_index(s, b, h)];
  dropout_forward(xs.data(), ys.data(), 0.25f, kSeed, kStream, part);
  for (int64_t s = 0; s < part.seq; ++s)
    for (int64_t b = 0; b < part.batch; ++b)
      for (int64_t h = 0; h < hidden; ++h)
        ASSERT_EQ(ys[(s * part.batch + b) * hidden + h], y[full_index(s, b, h)]) << s << " " << b << " " << h;
}

TEST(Dropout, InPlaceEqualsOutOfPlace) {
  DropoutRegion r{.seq = 4, .batch = 3, .hidden = 1500, .seq_offset = 0, .seq_total = 4, .sample_offset = 0};
  std::vector<float> x = testing::random_vector(numel(r), 5), y(x.size()), z = x;
  dropout_forward(x.data(), y.data(), 0.2f, kSeed, kStream, r);
  dropout_forward(z.data(), z.data(), 0.2f, kSeed, kStream, r);
  EXPECT_EQ(std::memcmp(y.data(), z.data(), y.size() * sizeof(float)), 0);
  dropout_backward(z.data(), z.data(), 0.2f, kSeed, kStream, r);  // now x * keep / (1-p)^2
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(z[i], y[i] / 0.8, 1e-6);
}

TEST(Dropout, DifferentStreamsDrawDifferentMasks) {
  DropoutRegion r{.seq = 8, .batch = 1, .hidden = 64, .seq_offset = 0, .seq_total = 8, .sample_offset = 0};
  std::vector<float> x(numel(r), 1.0f), a(x.size()), b(x.size());
  dropout_forward(x.data(), a.data(), 0.5f, kSeed, 1, r);
  dropout_forward(x.data(), b.data(), 0.5f, kSeed, 2, r);
  int64_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
  EXPECT_GT(differ, numel(r) / 4);
}

TEST(Dropout, ZeroPCopiesAndBadPThrows) {
  DropoutRegion r{.seq = 2, .batch = 2, .hidden = 9, .seq_offset = 0, .seq_total = 2, .sample_offset = 0};
  std::vector<float> x = testing::random_vector(numel(r), 6), y(x.size());
  dropout_forward(x.data(), y.data(), 0.0f, kSeed, kStream, r);
  EXPECT_EQ(x, y);
  dropout_forward(y.data(), y.data(), 0.0f, kSeed, kStream, r);
  EXPECT_EQ(x, y);
  for (float p : {1.0f, -0.1f, std::numeric_limits<float>::quiet_NaN()})
    EXPECT_THROW(dropout_forward(x.data(), y.data(), p, kSeed, kStream, r), Error) << p;
  DropoutRegion bad = r;
  bad.seq_offset = 1;  // rows [1, 3) of a 2-row sequence
  EXPECT_THROW(dropout_forward(x.data(), y.data(), 0.1f, kSeed, kStream, bad), Error);
}

}  // namespace
}  // namespace tessera::kernels
