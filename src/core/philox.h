// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a counter-based
// generator. The i-th random number of a stream is a pure function of (key, counter), so dropout masks
// and initial weights depend only on *which* element they belong to, never on the order of generation,
// the thread count or the parallel layout. Everything but hash_name is marked for host and device
// (core/host_device.h): integer arithmetic is exact on both, so a GPU draws bit-identical masks.
#pragma once

#include <math.h>  // sqrt, log, cos: the C functions, which device code has too

#include <cstdint>
#include <string_view>

#include "core/host_device.h"

namespace tessera {

struct Philox4x32 {
  static constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  static constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

  struct Block {
    uint32_t v[4];
  };

  // One of the ten rounds on counter (c0, c1, c2, c3) with round key (k0, k1). Kernels that run many
  // counters at once (kernels/dropout.cc, lane-parallel over blocks) call it in their own loop.
  TESSERA_HOST_DEVICE static void apply_round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0,
                                        uint32_t k1) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = static_cast<uint32_t>(p1);
    c2 = n2;
    c3 = static_cast<uint32_t>(p0);
  }

  TESSERA_HOST_DEVICE static Block generate(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                            uint32_t k1) {
    for (int r = 0; r < 10; ++r) {
      if (r > 0) {
        k0 += kW0;
        k1 += kW1;
      }
      apply_round(c0, c1, c2, c3, k0, k1);
    }
    return {{c0, c1, c2, c3}};
  }
};

// A stream of random numbers identified by (seed, stream id); element `index` of the stream is
// lane index%4 of the Philox block at counter (index/4, stream).
class PhiloxStream {
 public:
  TESSERA_HOST_DEVICE PhiloxStream(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}

  // Four 32-bit random words for counter `block`.
  TESSERA_HOST_DEVICE Philox4x32::Block block(uint64_t block_index) const {
    return Philox4x32::generate(static_cast<uint32_t>(block_index), static_cast<uint32_t>(block_index >> 32),
                                static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32),
                                static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32));
  }
  TESSERA_HOST_DEVICE uint32_t bits(uint64_t index) const { return block(index >> 2).v[index & 3]; }
  // Uniform in [0, 1) with 24 bits of resolution.
  TESSERA_HOST_DEVICE float uniform(uint64_t index) const { return uniform_from_bits(bits(index)); }
  // Standard normal: Box-Muller over the two words of element `index`'s pair in the block
  // (block index/2, lanes 2*(index%2) and 2*(index%2)+1).
  TESSERA_HOST_DEVICE float normal(uint64_t index) const {
    Philox4x32::Block b = block(index >> 1);
    int lane = static_cast<int>(index & 1) * 2;
    double u1 = (static_cast<double>(b.v[lane]) + 0.5) * (1.0 / 4294967296.0);
    double u2 = (static_cast<double>(b.v[lane + 1]) + 0.5) * (1.0 / 4294967296.0);
    return static_cast<float>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  }

  TESSERA_HOST_DEVICE static float uniform_from_bits(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

 private:
  uint64_t seed_, stream_;
};

// FNV-1a over a string: turns a parameter name into a stream id, so initialisation is keyed by name.
inline uint64_t hash_name(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Mixes several integers into one stream id (splitmix64 finaliser per step).
TESSERA_HOST_DEVICE inline uint64_t mix_stream(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace tessera
