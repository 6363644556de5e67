// Dropout with a regenerated Philox mask, fp32.
//
// Element (s, b, h) keeps its value iff PhiloxStream(seed, stream).uniform(g) >= p, where g is its
// index in the global [seq_total, samples, hidden] tensor (DropoutRegion; the keying and the keep test
// are kernels/math/dropout.h, shared with a GPU kernel). Along h the global index
// is consecutive, so one Philox block (4 words) serves 4 neighbouring elements. Work is cut into
// (row, kColumnsPerChunk-column) tasks; each task generates the Philox blocks of its columns as a batch,
// lane-parallel over blocks, which the compiler vectorises (vpmuludq does four 32x32->64 products).
#include "kernels/cpu/dropout.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/philox.h"
#include "core/profiler.h"
#include "kernels/math/dropout.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {
namespace {

constexpr int64_t kColumnsPerChunk = 1024;             // columns per task
constexpr int64_t kBlocks = kColumnsPerChunk / 4 + 1;  // Philox blocks a chunk can touch (it may start mid-block)

// mask[j] = scale if element g0 + j of the (seed, stream) Philox stream is kept, else 0; n <= kColumnsPerChunk.
// Bitwise the same numbers as PhiloxStream::uniform: the rounds below are Philox4x32::generate's,
// run over a batch of counters at once.
void keep_mask(uint64_t seed, uint64_t stream, uint64_t g0, int64_t n, float p, float scale, float* mask) {
  uint64_t first = g0 >> 2;
  int64_t nb = static_cast<int64_t>(((g0 + n - 1) >> 2) - first + 1);
  uint32_t c0[kBlocks], c1[kBlocks], c2[kBlocks], c3[kBlocks];
  for (int64_t i = 0; i < nb; ++i) {
    uint64_t counter = first + static_cast<uint64_t>(i);
    c0[i] = static_cast<uint32_t>(counter);
    c1[i] = static_cast<uint32_t>(counter >> 32);
    c2[i] = static_cast<uint32_t>(stream);
    c3[i] = static_cast<uint32_t>(stream >> 32);
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int64_t i = 0; i < nb; ++i) Philox4x32::apply_round(c0[i], c1[i], c2[i], c3[i], k0, k1);
    k0 += Philox4x32::kW0;
    k1 += Philox4x32::kW1;
  }
  // Stream element first*4 + w is lane w%4 of block w/4: interleave so words[] is indexed by element.
  uint32_t words[4 * kBlocks];
  for (int64_t i = 0; i < nb; ++i) {
    words[4 * i + 0] = c0[i];
    words[4 * i + 1] = c1[i];
    words[4 * i + 2] = c2[i];
    words[4 * i + 3] = c3[i];
  }
  const uint32_t* w = words + (g0 & 3);
  for (int64_t j = 0; j < n; ++j) mask[j] = math::dropout_keeps(w[j], p) ? scale : 0.0f;
}

void dropout_apply(const float* in, float* out, float p, uint64_t seed, uint64_t stream, const DropoutRegion& r) {
  math::check_dropout(p, r);
  int64_t rows = r.seq * r.batch;
  if (p == 0.0f) {  // identity: nothing to draw
    if (in != out) std::copy(in, in + rows * r.hidden, out);
    return;
  }
  float scale = 1.0f / (1.0f - p);
  int64_t chunks = (r.hidden + kColumnsPerChunk - 1) / kColumnsPerChunk;
#pragma omp parallel for collapse(2) schedule(static) if (parallel : parallel_worth(2 * rows * r.hidden))
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t c = 0; c < chunks; ++c) {
      int64_t s = row / r.batch, b = row % r.batch;
      int64_t h0 = c * kColumnsPerChunk, n = std::min(kColumnsPerChunk, r.hidden - h0);
      uint64_t g0 = math::dropout_element(r, s, b, h0);
      float mask[kColumnsPerChunk];
      keep_mask(seed, stream, g0, n, p, scale, mask);
      const float* x = in + row * r.hidden + h0;
      float* y = out + row * r.hidden + h0;
      for (int64_t j = 0; j < n; ++j) y[j] = x[j] * mask[j];
    }
  }
}

}  // namespace

void dropout_forward(const float* x, float* y, float p, uint64_t seed, uint64_t stream, const DropoutRegion& r) {
  TESSERA_PROFILE_SCOPE("dropout_forward");
  dropout_apply(x, y, p, seed, stream, r);
}

// The mask is a pure function of (seed, stream, global index), so backward regenerates it.
void dropout_backward(const float* dy, float* dx, float p, uint64_t seed, uint64_t stream, const DropoutRegion& r) {
  TESSERA_PROFILE_SCOPE("dropout_backward");
  dropout_apply(dy, dx, p, seed, stream, r);
}

}  // namespace tessera::kernels::cpu
