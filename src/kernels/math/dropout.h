// The dropout keying and keep decision, shared by the CPU kernels (kernels/dropout.cc,
// kernels/attention.cc) and a GPU's: which Philox element an activation or attention probability
// draws, and whether it is kept. Philox itself is core/philox.h (also host and device), so a GPU
// regenerates bit-identical masks.
#pragma once

#include <cstdint>

#include "core/check.h"
#include "core/host_device.h"
#include "kernels/attention.h"
#include "kernels/dropout.h"

namespace tessera::kernels::math {

// The checks of a dropout call's arguments, on the host (the CPU and the CUDA kernels make the same).
inline void check_dropout(float p, const DropoutRegion& r) {
  TESSERA_CHECK(p >= 0.0f && p < 1.0f, "dropout: p must be in [0, 1), got ", p);
  TESSERA_CHECK(r.seq >= 0 && r.batch >= 0 && r.hidden >= 0 && r.seq_offset >= 0 && r.sample_offset >= 0,
                "dropout: negative region size or offset");
  TESSERA_CHECK(r.seq_offset + r.seq <= r.seq_total, "dropout: region rows [", r.seq_offset, ", ",
                r.seq_offset + r.seq, ") exceed seq_total ", r.seq_total);
}

// Philox element of local activation (s, b, h) of a DropoutRegion: its index in the global
// [samples, seq_total, hidden] order, ((sample_offset + b) * seq_total + seq_offset + s) * hidden + h.
TESSERA_HOST_DEVICE inline uint64_t dropout_element(const DropoutRegion& r, int64_t s, int64_t b, int64_t h) {
  return static_cast<uint64_t>(((r.sample_offset + b) * r.seq_total + r.seq_offset + s) * r.hidden + h);
}

// Philox element of attention probability (b, h, i, 0) of a local [batch, heads, seq, seq] block;
// (b, h, i, j) is this + j.
TESSERA_HOST_DEVICE inline uint64_t attention_dropout_row(const AttentionDropout& d, int64_t seq, int64_t b,
                                                          int64_t h, int64_t i) {
  const uint64_t bh = static_cast<uint64_t>((d.sample_offset + b) * d.total_heads + d.head_offset + h);
  return (bh * static_cast<uint64_t>(seq) + static_cast<uint64_t>(i)) * static_cast<uint64_t>(seq);
}

// The element's uniform: PhiloxStream::uniform_from_bits of its word, 24 bits in [0, 1). The 24-bit
// value goes through int32, which converts to float in SIMD (uint32 does not before AVX-512); the
// value is the same. The router's input jitter (kernels/math/moe_routing.h) draws this one too.
TESSERA_HOST_DEVICE inline float dropout_uniform(uint32_t bits) {
  return static_cast<float>(static_cast<int32_t>(bits >> 8)) * (1.0f / 16777216.0f);
}

// Kept iff the element's uniform is at least p.
TESSERA_HOST_DEVICE inline bool dropout_keeps(uint32_t bits, float p) { return dropout_uniform(bits) >= p; }

}  // namespace tessera::kernels::math
