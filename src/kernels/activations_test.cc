#include "kernels/cpu/activations.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

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

const double kK = std::sqrt(2.0 / std::numbers::pi), kC = 0.044715;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- float64 references ----

double gelu_ref(double x) { return 0.5 * x * (1 + std::tanh(kK * (x + kC * x * x * x))); }
double gelu_grad_ref(double x) {
  double t = std::tanh(kK * (x + kC * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kK * (1 + 3 * kC * x * x);
}
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

Vec swiglu_ref(const Vec& x, int64_t rows, int64_t width) {
  Vec y(rows * width);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) {
      double g = x[r * 2 * width + c], u = x[r * 2 * width + width + c];
      y[r * width + c] = g * sigmoid(g) * u;
    }
  return y;
}

Vec swiglu_ref_backward(const Vec& x, const Vec& dy, int64_t rows, int64_t width) {
  Vec dx(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) {
      double g = x[r * 2 * width + c], u = x[r * 2 * width + width + c], s = sigmoid(g), d = dy[r * width + c];
      dx[r * 2 * width + c] = d * u * s * (1 + g * (1 - s));
      dx[r * 2 * width + width + c] = d * g * s;
    }
  return dx;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Random values in [-6, 6] plus the tails and points around zero.
std::vector<float> gelu_inputs(int64_t n, uint64_t seed) {
  auto x = random_vector(n, seed, -6.0f, 6.0f);
  const float special[] = {0.0f, 1e-3f, -1e-3f, -0.75f, 3.0f, -3.0f, 10.0f, -10.0f, 20.0f, -20.0f, 100.0f, -100.0f};
  for (size_t i = 0; i < std::size(special) && i < x.size(); ++i) x[i] = special[i];
  return x;
}

const int64_t kSizes[] = {1, 7, 33, 768, 1000};

// ---- references' derivatives against finite differences of L = sum(y * R) ----

TEST(ActivationsReference, GeluGradMatchesFiniteDifferences) {
  for (int64_t n : {7, 33, 300}) {
    Vec x = to_double(random_vector(n, 1, -6.0f, 6.0f)), R = to_double(random_vector(n, 2));
    auto L = [&](const Vec& v) {
      double s = 0;
      for (size_t i = 0; i < v.size(); ++i) s += gelu_ref(v[i]) * R[i];
      return s;
    };
    Vec g = numeric_gradient(L, x), dx(n);
    for (int64_t i = 0; i < n; ++i) dx[i] = R[i] * gelu_grad_ref(x[i]);
    EXPECT_LE(max_scaled_error(dx, g, 1e-7, 1e-6), 1.0) << "n=" << n;
  }
}

// tanh's kernels against float64 std::tanh, and the backward (from the output) against finite differences.
TEST(Activations, TanhMatchesFloat64AndFiniteDifferences) {
  for (int64_t n : kSizes) {
    const std::vector<float> x = gelu_inputs(n, 11), R = random_vector(n, 12);
    std::vector<float> y(n), dx(n);
    tanh_forward(x.data(), y.data(), n);
    Vec y_ref(n);
    for (int64_t i = 0; i < n; ++i) y_ref[i] = std::tanh(static_cast<double>(x[i]));
    EXPECT_LE(max_scaled_error(y, y_ref, 1e-6, 1e-6), 1.0) << n;
    tanh_backward(y.data(), R.data(), dx.data(), n);
    Vec g = numeric_gradient(
        [&](const Vec& v) {
          double s = 0;
          for (size_t i = 0; i < v.size(); ++i) s += std::tanh(v[i]) * R[i];
          return s;
        },
        to_double(x));
    EXPECT_LE(max_scaled_error(dx, g, 1e-5, 1e-5), 1.0) << n;
  }
}

TEST(ActivationsReference, SwigluBackwardMatchesFiniteDifferences) {
  for (auto [rows, width] : {std::pair<int64_t, int64_t>{1, 1}, {1, 7}, {3, 33}, {2, 100}}) {
    Vec x = to_double(random_vector(rows * 2 * width, 3, -4.0f, 4.0f));
    Vec R = to_double(random_vector(rows * width, 4));
    Vec g = numeric_gradient([&](const Vec& v) { return dot(swiglu_ref(v, rows, width), R); }, x);
    EXPECT_LE(max_scaled_error(swiglu_ref_backward(x, R, rows, width), g, 1e-7, 1e-6), 1.0)
        << rows << "x" << width;
  }
}

// ---- kernels against the references ----

TEST(Activations, GeluMatchesReference) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto x = gelu_inputs(n, 5);
    auto dy = random_vector(n, 6);
    std::vector<float> y(n, kNaN), dx(n, kNaN);  // NaN-filled: the kernels must overwrite
    gelu_forward(x.data(), y.data(), n);
    gelu_backward(x.data(), dy.data(), dx.data(), n);
    Vec y_ref(n), dx_ref(n);
    for (int64_t i = 0; i < n; ++i) {
      y_ref[i] = gelu_ref(x[i]);
      dx_ref[i] = dy[i] * gelu_grad_ref(x[i]);
    }
    EXPECT_LE(max_scaled_error(y, y_ref, 1e-6, 1e-5), 1.0);
    EXPECT_LE(max_scaled_error(dx, dx_ref, 1e-6, 1e-5), 1.0);

    // In place: dx aliasing dy gives the same bits.
    auto inplace = dy;
    gelu_backward(x.data(), inplace.data(), inplace.data(), n);
    EXPECT_EQ(inplace, dx);
  }
}

TEST(Activations, SwigluMatchesReference) {
  for (auto [rows, width] : {std::pair<int64_t, int64_t>{1, 1}, {1, 7}, {3, 33}, {2, 768}, {5, 16}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(width));
    auto x = random_vector(rows * 2 * width, 7, -8.0f, 8.0f);
    auto dy = random_vector(rows * width, 8);
    std::vector<float> y(rows * width, kNaN), dx(rows * 2 * width, kNaN);
    swiglu_forward(x.data(), y.data(), rows, width);
    swiglu_backward(x.data(), dy.data(), dx.data(), rows, width);
    EXPECT_LE(max_scaled_error(y, swiglu_ref(to_double(x), rows, width), 1e-6, 1e-5), 1.0);
    EXPECT_LE(max_scaled_error(dx, swiglu_ref_backward(to_double(x), to_double(dy), rows, width), 1e-6, 1e-5), 1.0);
  }
}

// A NaN in the input must show up in the output, not be hidden by the exp's range clamp.
TEST(Activations, NaNPropagates) {
  std::vector<float> x = {kNaN, 1.0f}, y(2), dx(2), dy = {1.0f, 1.0f};
  gelu_forward(x.data(), y.data(), 1);
  gelu_backward(x.data(), dy.data(), dx.data(), 1);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_TRUE(std::isnan(dx[0]));
  swiglu_forward(x.data(), y.data(), 1, 1);  // gate NaN
  swiglu_backward(x.data(), dy.data(), dx.data(), 1, 1);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_TRUE(std::isnan(dx[0]) && std::isnan(dx[1]));
}

}  // namespace
}  // namespace tessera::kernels
