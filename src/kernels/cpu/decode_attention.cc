#include "kernels/cpu/decode_attention.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/profiler.h"
#include "kernels/vector_math.h"
#include "kernels/parallel_grain.h"

namespace tessera::kernels::cpu {
namespace {

// Each query row's sequence and position, so that one parallel loop covers every row of the step.
struct QueryRow {
  const PagedRows* sequence;
  int64_t position;
};

std::vector<QueryRow> query_rows(std::span<const PagedRows> sequences, int64_t block_size) {
  std::vector<QueryRow> rows;
  for (const PagedRows& s : sequences) {
    TESSERA_CHECK(s.rows >= 0 && s.past >= 0 &&
                      s.past + s.rows <= static_cast<int64_t>(s.blocks.size()) * block_size,
                  "attention_decode: ", s.blocks.size(), " blocks of ", block_size, " positions cannot hold ",
                  s.past + s.rows);
    for (int64_t i = 0; i < s.rows; ++i) rows.push_back({&s, s.past + i});
  }
  return rows;
}

// Position p's row in a pool of [blocks, block_size, kv_heads, d], as an offset in units of kv_heads * d.
inline int64_t pool_row(const PagedRows& s, int64_t p, int64_t block_size) {
  return static_cast<int64_t>(s.blocks[p / block_size]) * block_size + p % block_size;
}

}  // namespace

void attention_decode(const float* q, const float* k_pool, const float* v_pool, float* out,
                      std::span<const PagedRows> sequences, int64_t block_size, int64_t heads, int64_t kv_heads,
                      int64_t d, float softmax_scale) {
  TESSERA_PROFILE_SCOPE("attention_decode");
  TESSERA_CHECK(kv_heads > 0 && heads % kv_heads == 0, "attention_decode: ", heads,
                " query heads are not a multiple of ", kv_heads, " key/value heads");
  TESSERA_CHECK(block_size > 0, "attention_decode: block size ", block_size);
  const int64_t per_group = heads / kv_heads;
  const std::vector<QueryRow> rows = query_rows(sequences, block_size);
  const int64_t n = static_cast<int64_t>(rows.size());
  int64_t keys = 0;  // keys read by all rows: the work
  for (const QueryRow& r : rows) keys += r.position + 1;
#pragma omp parallel if (parallel : parallel_worth(2 * keys * heads * d))
  {
    // Per thread, kept between calls: a decoding step calls this once per layer (no allocation per call).
    thread_local std::vector<float> scores;
    thread_local std::vector<int64_t> key_rows;  // element offsets in either pool
#pragma omp for collapse(2) schedule(static)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t h = 0; h < heads; ++h) {
        const PagedRows& s = *rows[i].sequence;
        const int64_t keys = rows[i].position + 1, g = h / per_group;
        scores.resize(keys);
        // Each cached position's row offset, block by block: no division per key (issue 40 found the
        // per-key p / block_size and p % block_size a good part of the kernel's time).
        key_rows.resize(keys);
        for (int64_t j0 = 0, b = 0; j0 < keys; j0 += block_size, ++b) {
          const int64_t base = (static_cast<int64_t>(s.blocks[b]) * block_size * kv_heads + g) * d;
          const int64_t end = std::min(keys, j0 + block_size);
          for (int64_t j = j0; j < end; ++j) key_rows[j] = base + (j - j0) * kv_heads * d;
        }
        const float* qi = q + (i * heads + h) * d;
        float max = -INFINITY;
        for (int64_t j = 0; j < keys; ++j) {
          const float* kj = k_pool + key_rows[j];
          float dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int64_t x = 0; x < d; ++x) dot += qi[x] * kj[x];
          scores[j] = dot * softmax_scale;
          max = std::max(max, scores[j]);
        }
        float sum = 0;
        for (int64_t j = 0; j < keys; ++j) sum += scores[j] = exp_approx(scores[j] - max);
        float* o = out + (i * heads + h) * d;
        std::fill(o, o + d, 0.0f);
        for (int64_t j = 0; j < keys; ++j) {
          const float p = scores[j] / sum;
          const float* vj = v_pool + key_rows[j];
#pragma omp simd
          for (int64_t x = 0; x < d; ++x) o[x] += p * vj[x];
        }
      }
  }
}

void write_kv_cache(const float* k, const float* v, float* k_pool, float* v_pool, std::span<const PagedRows> sequences,
                    int64_t block_size, int64_t kv_heads, int64_t d) {
  const std::vector<QueryRow> rows = query_rows(sequences, block_size);
  const size_t row_bytes = static_cast<size_t>(kv_heads * d) * sizeof(float);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t to = pool_row(*rows[i].sequence, rows[i].position, block_size) * kv_heads * d;
    std::memcpy(k_pool + to, k + i * kv_heads * d, row_bytes);
    std::memcpy(v_pool + to, v + i * kv_heads * d, row_bytes);
  }
}

}  // namespace tessera::kernels::cpu
