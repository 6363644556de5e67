// Helpers for tests only: random data, float64 finite differences, error measures and error messages.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/philox.h"

namespace tessera::testing {

// Deterministic pseudo-random values in [lo, hi).
inline std::vector<float> random_vector(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  PhiloxStream s(seed, 0x7e57);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * s.uniform(i);
  return v;
}

// The message of the tessera::Error f throws, or "" when it returns.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Central-difference gradient of a scalar function of x, in float64.
inline std::vector<double> numeric_gradient(const std::function<double(const std::vector<double>&)>& f,
                                            std::vector<double> x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double saved = x[i];
    x[i] = saved + h;
    double up = f(x);
    x[i] = saved - h;
    double down = f(x);
    x[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// max |a - b| / (atol + rtol * |b|): <= 1 means every element is within tolerance.
template <typename A, typename B>
double max_scaled_error(const A& a, const B& b, double atol, double rtol) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double ref = static_cast<double>(b[i]);
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - ref) / (atol + rtol * std::abs(ref)));
  }
  return worst;
}

}  // namespace tessera::testing
