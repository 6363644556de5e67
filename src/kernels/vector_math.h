// Elementwise math written so that GCC vectorises it without -ffast-math (libm's expf is a scalar
// call otherwise). Shared by the kernels that need exp in their inner loops, and marked for host and
// device (core/host_device.h) so a GPU kernel computes the same exp.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace tessera::kernels {

// exp(x) within ~1 ulp, in plain arithmetic the compiler vectorises (libm's expf is a scalar call
// without -ffast-math). exp(x) = 2^n exp(r), n = round(x / ln2), |r| <= ln2 / 2, exp(r) by Cephes'
// expf polynomial. |x| is clamped to 87 so 2^n stays a normal float; below -87 (-inf included) the
// result is 0, and NaN stays NaN. The range tests are integer ops on the bits, applied as masks:
// a float compare or a select would keep GCC from vectorising without -fno-trapping-math.
TESSERA_HOST_DEVICE inline float exp_approx(float x) {
  constexpr int32_t k87 = std::bit_cast<int32_t>(87.0f), kInf = std::bit_cast<int32_t>(INFINITY);
  int32_t bits = std::bit_cast<int32_t>(x), mag = bits & 0x7fffffff;
  bool underflow = bits < 0 && mag > k87, nan = mag > kInf;
  x = std::bit_cast<float>((bits & INT32_MIN) | std::min(mag, k87));
  // Adding 1.5 * 2^23 rounds x / ln2 to an integer in the low mantissa bits.
  constexpr float kShift = 12582912.0f;
  float t = x * 1.44269504088896341f + kShift;
  int32_t n = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kShift);  // in [-126, 126]
  float nf = t - kShift;
  // ln2 split in two (Cephes C1 + C2) so that x - n ln2 is nearly exact.
  float r = x - nf * 0.693359375f;
  r = r + nf * 2.12194440e-4f;
  float q = 1.9875691500e-4f;
  q = q * r + 1.3981999507e-3f;
  q = q * r + 8.3334519073e-3f;
  q = q * r + 4.1665795894e-2f;
  q = q * r + 1.6666665459e-1f;
  q = q * r + 5.0000001201e-1f;
  float e = q * r * r + r + 1.0f;
  int32_t out = std::bit_cast<int32_t>(e * std::bit_cast<float>((n + 127) << 23));
  out &= static_cast<int32_t>(underflow) - 1;        // 0 below -87
  out |= -static_cast<int32_t>(nan) & 0x7fc00000;    // quiet NaN in, NaN out
  return std::bit_cast<float>(out);
}

}  // namespace tessera::kernels
