// Fused softmax cross-entropy, fp32 logits, float64 sum of exponentials.
//
// Forward is two passes over each row (max, then sum exp(x - max)); a 50k-float row is 200 KB, so
// the second pass reads from L2. Subtracting the max keeps every exponent <= 0: no overflow however
// large the logits. The sum is accumulated in double: 50k terms in float would lose ~1e-5 relative.
// Backward is one elementwise pass, cut into (row, column chunk) tasks so that a few long rows
// still spread over all threads.
#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/profiler.h"
#include "kernels/math/softmax.h"
#include "kernels/precision.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {
namespace {

constexpr int64_t kColChunk = 4096;  // backward columns per task (16 KB)

struct RowStats {
  float max;
  double sumexp;  // sum exp(x - max)
};

// Float bits mapped to int32 so that integer order is float order (a negative float's magnitude bits
// are flipped; the map is its own inverse). An integer max vectorises, a float one does not
// without -fno-trapping-math. A NaN (positive) wins the max, so it still reaches the loss.
inline int32_t ordered_bits(int32_t b) { return b ^ ((b >> 31) & 0x7fffffff); }

RowStats row_stats(const float* x, int64_t n) {
  int32_t mo = ordered_bits(std::bit_cast<int32_t>(-INFINITY));
  for (int64_t j = 0; j < n; ++j) mo = std::max(mo, ordered_bits(std::bit_cast<int32_t>(x[j])));
  float m = std::bit_cast<float>(ordered_bits(mo));
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += math::softmax_weight(x[j], m);
  return {m, s};
}

// One chunk of a row's backward, in place: the loop of cross_entropy_backward (the target's term taken
// from its logit kept before the pass).
void backward_chunk(float* x, int64_t n, int64_t t, float l, float d, DType round_output) {
  const bool has_target = t >= 0 && t < n;
  const float xt = has_target ? x[t] : 0.0f;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) x[j] = math::cross_entropy_dlogit(x[j], l, d);
  if (has_target) x[t] = math::cross_entropy_dlogit_target(xt, l, d);
  if (round_output != DType::F32) round_to_serial(round_output, x, x, n);
}

// A row of T as fp32: the row itself, or bf16 widened into `buffer`.
const float* row_as_f32(const float* x, int64_t, std::vector<float>&) { return x; }
const float* row_as_f32(const uint16_t* x, int64_t n, std::vector<float>& buffer) {
  buffer.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) buffer[j] = bf16_to_fp32(x[j]);
  return buffer.data();
}

}  // namespace

void cross_entropy_shard_stats(const float* logits, const int32_t* targets, float* max_out, float* sumexp_out,
                               float* target_logit_out, int64_t rows, int64_t vocab_local, int64_t vocab_begin) {
  TESSERA_PROFILE_SCOPE("cross_entropy_shard_stats");
  TESSERA_CHECK(vocab_local > 0, "cross_entropy_shard_stats: empty vocabulary shard");
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(2 * rows * vocab_local))
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * vocab_local;
    RowStats st = row_stats(x, vocab_local);
    int64_t t = static_cast<int64_t>(targets[r]) - vocab_begin;
    max_out[r] = st.max;
    sumexp_out[r] = static_cast<float>(st.sumexp);
    target_logit_out[r] = (t >= 0 && t < vocab_local) ? x[t] : 0.0f;
  }
}

void cross_entropy_forward(const float* logits, const int32_t* targets, float* loss, float* lse, int64_t rows,
                           int64_t vocab) {
  TESSERA_PROFILE_SCOPE("cross_entropy_forward");
  TESSERA_CHECK(vocab > 0, "cross_entropy_forward: empty vocabulary");
  // Checked up front: an exception must not escape an OpenMP region.
  for (int64_t r = 0; r < rows; ++r)
    TESSERA_CHECK(targets[r] >= 0 && targets[r] < vocab, "cross_entropy_forward: target id ", targets[r],
                  " of row ", r, " is outside the vocabulary [0, ", vocab, ")");
#pragma omp parallel for schedule(static) if (parallel : parallel_worth(2 * rows * vocab))
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * vocab;
    RowStats st = row_stats(x, vocab);
    double l = st.max + std::log(st.sumexp);
    lse[r] = static_cast<float>(l);
    loss[r] = static_cast<float>(l - x[targets[r]]);
  }
}

void cross_entropy_backward(float* logits, const int32_t* targets, const float* lse, const float* dloss,
                            int64_t rows, int64_t vocab_local, int64_t vocab_begin, DType round_output) {
  TESSERA_PROFILE_SCOPE("cross_entropy_backward");
  int64_t chunks = (vocab_local + kColChunk - 1) / kColChunk;
#pragma omp parallel for collapse(2) schedule(static) if (parallel : parallel_worth(2 * rows * vocab_local))
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < chunks; ++c) {
      int64_t j0 = c * kColChunk, n = std::min(kColChunk, vocab_local - j0);
      float* x = logits + r * vocab_local + j0;
      // The one-hot term lives in (at most) one chunk of one shard; its logit is kept so that
      // (p - 1) d is formed before scaling (p d - d would lose bits when p is near 1).
      backward_chunk(x, n, static_cast<int64_t>(targets[r]) - vocab_begin - j0, lse[r], dloss[r], round_output);
    }
  }
}

template <typename T>
void cross_entropy_fused(T* logits, const int32_t* targets, const float* dloss, float* max_out, float* sumexp_out,
                         float* target_logit_out, float* lse_out, int64_t rows, int64_t vocab, DType round_output) {
  TESSERA_PROFILE_SCOPE("cross_entropy_fused");
  TESSERA_CHECK(vocab > 0, "cross_entropy_fused: empty vocabulary");
  constexpr bool kBf16 = std::is_same_v<T, uint16_t>;
#pragma omp parallel if (parallel : parallel_worth(3 * rows * vocab))
  {
    std::vector<float> wide;  // a bf16 row as fp32
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      T* row = logits + r * vocab;
      float* x = const_cast<float*>(row_as_f32(row, vocab, wide));
      const RowStats st = row_stats(x, vocab);
      const int64_t t = targets[r];
      max_out[r] = st.max;
      sumexp_out[r] = static_cast<float>(st.sumexp);
      target_logit_out[r] = (t >= 0 && t < vocab) ? x[t] : 0.0f;
      // As masked_loss_sum makes it from the stored statistics (fp32 max + log of the fp32 sum).
      const float lse = max_out[r] + std::log(sumexp_out[r]);
      lse_out[r] = lse;
      for (int64_t j0 = 0; j0 < vocab; j0 += kColChunk)
        backward_chunk(x + j0, std::min(kColChunk, vocab - j0), t - j0, lse, dloss[r],
                       kBf16 ? DType::F32 : round_output);
      if constexpr (kBf16)
        for (int64_t j = 0; j < vocab; ++j) row[j] = fp32_to_bf16(x[j]);
    }
  }
}

template void cross_entropy_fused<float>(float*, const int32_t*, const float*, float*, float*, float*, float*, int64_t,
                                         int64_t, DType);
template void cross_entropy_fused<uint16_t>(uint16_t*, const int32_t*, const float*, float*, float*, float*, float*,
                                            int64_t, int64_t, DType);

}  // namespace tessera::kernels::cpu
