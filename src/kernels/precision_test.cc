#include "kernels/precision.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/check.h"

namespace tessera::kernels {
namespace {

// Every finite value of a 16-bit type, ascending, from its bit patterns (decoded in double by hand for
// fp16 so that the reference does not lean on the conversions under test).
double fp16_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);  // subnormal
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// The float64 reference of round-to-nearest-even into a type with the given finite values (ascending,
// each with its bit pattern); beyond the largest value by half a step or more: infinity.
float reference_round(double x, const std::vector<std::pair<double, uint16_t>>& values, double overflow) {
  if (std::abs(x) >= overflow) return x > 0 ? INFINITY : -INFINITY;
  auto hi = std::lower_bound(values.begin(), values.end(), std::make_pair(x, uint16_t{0}),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
  if (hi == values.begin()) return static_cast<float>(hi->first);
  auto lo = hi - 1;
  if (hi == values.end() || x - lo->first < hi->first - x) return static_cast<float>(lo->first);
  if (hi->first - x < x - lo->first) return static_cast<float>(hi->first);
  return static_cast<float>((lo->second & 1) == 0 ? lo->first : hi->first);  // a tie goes to the even one
}

std::vector<std::pair<double, uint16_t>> finite_values(double (*decode)(uint16_t), bool bf16) {
  std::vector<std::pair<double, uint16_t>> v;
  for (uint32_t h = 0; h < 65536; ++h) {
    const int exponent = bf16 ? (h >> 7) & 0xff : (h >> 10) & 0x1f;
    if (exponent == (bf16 ? 0xff : 0x1f)) continue;  // inf and NaN
    if (h == 0x8000) continue;                         // -0 equals +0
    v.push_back({decode(static_cast<uint16_t>(h)), static_cast<uint16_t>(h)});
  }
  std::sort(v.begin(), v.end());
  return v;
}

double bf16_value(uint16_t h) { return bf16_to_fp32(h); }  // exact: a bit shift

// Values spread over every binade of fp32 that matters (and exact ties, which random values miss).
std::vector<float> test_values(double largest, double step) {
  std::mt19937 rng(7);
  std::vector<float> out;
  for (int e = -30; e <= 20; ++e)
    for (int i = 0; i < 400; ++i) {
      double m = std::uniform_real_distribution<double>(1, 2)(rng);
      out.push_back(static_cast<float>((i % 2 ? -1 : 1) * std::ldexp(m, e)));
    }
  for (double x = 1; x < largest; x *= 3.7) out.push_back(static_cast<float>(x + step * x / 2));  // near-ties
  out.push_back(0.0f);
  out.push_back(static_cast<float>(largest));
  return out;
}

TEST(Precision, Fp16RoundsToNearestEvenAsTheFloat64Reference) {
  auto values = finite_values(fp16_value, false);
  const double overflow = 65504.0 + 16.0;  // half of the last step above the largest finite value
  for (float x : test_values(65504, 1.0 / 1024)) {
    const float expected = reference_round(x, values, overflow);
    EXPECT_EQ(round_to(DType::F16, x), expected) << "x = " << x;
  }
  // Exact ties: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10 and goes to 1 (even); 1 + 3 * 2^-11 to
  // 1 + 2^-9 (even); 65520 overflows, 65519 does not.
  EXPECT_EQ(round_to(DType::F16, 1.0f + std::ldexp(1.0f, -11)), 1.0f);
  EXPECT_EQ(round_to(DType::F16, 1.0f + 3 * std::ldexp(1.0f, -11)), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(round_to(DType::F16, 65520.0f), INFINITY);
  EXPECT_EQ(round_to(DType::F16, 65519.0f), kFp16Max);
  EXPECT_EQ(round_to(DType::F16, std::ldexp(1.0f, -25)), 0.0f);           // a tie with 0 goes to 0
  EXPECT_EQ(round_to(DType::F16, std::ldexp(1.5f, -25)), std::ldexp(1.0f, -24));  // smallest subnormal
}

TEST(Precision, Bf16RoundsToNearestEvenAsTheFloat64Reference) {
  auto values = finite_values(bf16_value, true);
  const double largest = values.back().first;
  const double overflow = largest + std::ldexp(1.0, 127 - 8);  // half a step above the largest finite value
  for (float x : test_values(1e30, 1.0 / 128)) {
    const float expected = reference_round(x, values, overflow);
    EXPECT_EQ(round_to(DType::BF16, x), expected) << "x = " << x;
  }
  EXPECT_EQ(round_to(DType::BF16, 1.0f + std::ldexp(1.0f, -8)), 1.0f);  // tie to even
  EXPECT_EQ(round_to(DType::BF16, 1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
}

TEST(Precision, EveryFp16BitPatternRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = fp16_to_fp32(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f)))) << h;
      continue;
    }
    if (((h >> 10) & 0x1f) != 0x1f) {
      EXPECT_EQ(static_cast<double>(f), fp16_value(bits)) << h;
    }
    EXPECT_EQ(fp32_to_fp16(f), bits) << h;
  }
}

TEST(Precision, ArraysMatchTheScalarAndEncodingsDecodeToTheRoundedValues) {
  std::vector<float> x = test_values(60000, 1.0 / 1024);
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    std::vector<float> out(x.size()), in_place = x;
    round_to(t, x.data(), out.data(), static_cast<int64_t>(x.size()));
    round_to(t, in_place.data(), in_place.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(out[i], round_to(t, x[i])) << dtype_name(t) << " " << x[i];
      ASSERT_EQ(in_place[i], out[i]);
    }
    if (t == DType::F32) {
      EXPECT_EQ(out, x);
      continue;
    }
    std::vector<uint16_t> bits(x.size());
    encode_16bit(t, x.data(), bits.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(t == DType::BF16 ? bf16_to_fp32(bits[i]) : fp16_to_fp32(bits[i]), out[i]) << x[i];
  }
  EXPECT_THROW(round_to(DType::I32, 1.0f), Error);
}

}  // namespace
}  // namespace tessera::kernels
