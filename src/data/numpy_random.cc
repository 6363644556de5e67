#include "data/numpy_random.h"

#include "core/check.h"

namespace tessera::data {

namespace {
constexpr int kN = 624;
constexpr int kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfU;
constexpr uint32_t kUpperMask = 0x80000000U;
constexpr uint32_t kLowerMask = 0x7fffffffU;
}  // namespace

NumpyRandomState::NumpyRandomState(uint32_t seed) {
  // Knuth's generator from the Mersenne Twister reference code; pos = N forces a twist first.
  for (int i = 0; i < kN; ++i) {
    key_[i] = seed;
    seed = 1812433253U * (seed ^ (seed >> 30)) + static_cast<uint32_t>(i + 1);
  }
  pos_ = kN;
}

void NumpyRandomState::twist() {
  auto mix = [](uint32_t upper, uint32_t lower) {
    const uint32_t y = (upper & kUpperMask) | (lower & kLowerMask);
    return (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
  };
  int i = 0;
  for (; i < kN - kM; ++i) key_[i] = key_[i + kM] ^ mix(key_[i], key_[i + 1]);
  for (; i < kN - 1; ++i) key_[i] = key_[i + kM - kN] ^ mix(key_[i], key_[i + 1]);
  key_[kN - 1] = key_[kM - 1] ^ mix(key_[kN - 1], key_[0]);
  pos_ = 0;
}

uint32_t NumpyRandomState::next_uint32() {
  if (pos_ == kN) twist();
  uint32_t y = key_[pos_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= y >> 18;
  return y;
}

uint64_t NumpyRandomState::next_uint64() {
  const uint64_t high = next_uint32();  // sequenced: the first draw is the high half
  return high << 32 | next_uint32();
}

uint64_t NumpyRandomState::random_interval(uint64_t max) {
  if (max == 0) return 0;
  // The smallest all-ones mask covering max.
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t value;
  if (max <= 0xffffffffULL) {
    while ((value = (next_uint32() & mask)) > max) {
    }
  } else {
    while ((value = (next_uint64() & mask)) > max) {
    }
  }
  return value;
}

double NumpyRandomState::random_sample() {
  const uint32_t a = next_uint32() >> 5;  // sequenced: a is drawn first
  const uint32_t b = next_uint32() >> 6;
  return (a * 67108864.0 + b) / 9007199254740992.0;
}

int64_t NumpyRandomState::randint(int64_t low, int64_t high) {
  TESSERA_CHECK(high > low, "randint: low >= high (", low, ", ", high, ")");
  return low + static_cast<int64_t>(random_interval(static_cast<uint64_t>(high - 1 - low)));
}

}  // namespace tessera::data
