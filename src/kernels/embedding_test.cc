#include "kernels/cpu/embedding.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/philox.h"
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

constexpr int64_t kVocab = 11, kMaxPos = 9;

// Ids in [0, kVocab) with repeats (more rows than ids, and rows 0 and 1 always equal).
std::vector<int32_t> random_ids(int64_t rows, int64_t bound, uint64_t seed) {
  PhiloxStream s(seed, 2);
  std::vector<int32_t> ids(rows);
  for (int64_t t = 0; t < rows; ++t) ids[t] = static_cast<int32_t>(s.bits(t) % bound);
  if (rows > 1) ids[1] = ids[0];
  return ids;
}

// ---- float64 reference, with the shard's [vb, ve) rule ----

struct Problem {
  int64_t rows, hidden, vb = 0, ve = kVocab;
  std::vector<int32_t> tokens, positions;
};

Vec embedding_ref(const Problem& p, const Vec& wte, const Vec* wpe) {
  Vec out(p.rows * p.hidden, 0.0);
  for (int64_t t = 0; t < p.rows; ++t)
    for (int64_t c = 0; c < p.hidden; ++c) {
      int64_t id = p.tokens[t];
      if (id >= p.vb && id < p.ve) out[t * p.hidden + c] += wte[(id - p.vb) * p.hidden + c];
      if (wpe) out[t * p.hidden + c] += (*wpe)[p.positions[t] * p.hidden + c];
    }
  return out;
}

void embedding_ref_backward(const Problem& p, const Vec& dout, Vec& dwte, Vec& dwpe) {
  dwte.assign((p.ve - p.vb) * p.hidden, 0.0);
  dwpe.assign(kMaxPos * p.hidden, 0.0);
  for (int64_t t = 0; t < p.rows; ++t)
    for (int64_t c = 0; c < p.hidden; ++c) {
      int64_t id = p.tokens[t];
      if (id >= p.vb && id < p.ve) dwte[(id - p.vb) * p.hidden + c] += dout[t * p.hidden + c];
      dwpe[p.positions[t] * p.hidden + c] += dout[t * p.hidden + c];
    }
}

Problem make_problem(int64_t rows, int64_t hidden, int64_t vb, int64_t ve, uint64_t seed) {
  Problem p{rows, hidden, vb, ve, random_ids(rows, kVocab, seed), random_ids(rows, kMaxPos, seed + 1)};
  return p;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

Vec plus(const std::vector<float>& a, const Vec& b) {
  Vec s(b.size());
  for (size_t i = 0; i < b.size(); ++i) s[i] = a[i] + b[i];
  return s;
}

template <typename T>
bool bitwise_equal(const T* a, const T* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(T)) == 0;
}

TEST(EmbeddingReference, BackwardMatchesFiniteDifferences) {
  for (int64_t hidden : {1, 7, 33}) {
    Problem p = make_problem(13, hidden, 4, 9, 1);  // a shard, so some ids are foreign
    Vec wte = to_double(random_vector((p.ve - p.vb) * hidden, 2));
    Vec wpe = to_double(random_vector(kMaxPos * hidden, 3));
    Vec R = to_double(random_vector(p.rows * hidden, 4));
    Vec dwte, dwpe;
    embedding_ref_backward(p, R, dwte, dwpe);
    Vec gte = numeric_gradient([&](const Vec& v) { return dot(embedding_ref(p, v, &wpe), R); }, wte);
    Vec gpe = numeric_gradient([&](const Vec& v) { return dot(embedding_ref(p, wte, &v), R); }, wpe);
    EXPECT_LE(max_scaled_error(dwte, gte, 1e-7, 1e-6), 1.0) << "hidden " << hidden;
    EXPECT_LE(max_scaled_error(dwpe, gpe, 1e-7, 1e-6), 1.0) << "hidden " << hidden;
  }
}

TEST(Embedding, MatchesReference) {
  for (int64_t rows : {1, 13, 100})
    for (int64_t hidden : {1, 7, 33, 768})
      for (auto [vb, ve] : {std::pair<int64_t, int64_t>{0, kVocab}, {4, 9}})
        for (bool with_wpe : {true, false}) {
          SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(hidden) + " vocab [" + std::to_string(vb) + ", " +
                       std::to_string(ve) + ")" + (with_wpe ? " wpe" : ""));
          Problem p = make_problem(rows, hidden, vb, ve, 10 + rows);
          auto wte = random_vector((ve - vb) * hidden, 11);
          auto wpe = random_vector(kMaxPos * hidden, 12);
          auto dout = random_vector(rows * hidden, 13);
          const int32_t* positions = with_wpe ? p.positions.data() : nullptr;

          std::vector<float> out(rows * hidden, -1.0f);
          embedding_forward(p.tokens.data(), positions, wte.data(), with_wpe ? wpe.data() : nullptr, out.data(),
                            rows, hidden, vb, ve);
          Vec wpe_d = to_double(wpe);
          Vec ref = embedding_ref(p, to_double(wte), with_wpe ? &wpe_d : nullptr);
          // One float add per element, correctly rounded: exact.
          for (int64_t i = 0; i < rows * hidden; ++i) ASSERT_EQ(out[i], static_cast<float>(ref[i])) << i;

          // Gradients accumulate: start from non-zero buffers.
          auto dwte = random_vector((ve - vb) * hidden, 14), dwpe = random_vector(kMaxPos * hidden, 15);
          auto dwte0 = dwte, dwpe0 = dwpe;
          embedding_backward(p.tokens.data(), positions, dout.data(), dwte.data(), with_wpe ? dwpe.data() : nullptr,
                             rows, hidden, vb, ve);
          Vec dwte_ref, dwpe_ref;
          embedding_ref_backward(p, to_double(dout), dwte_ref, dwpe_ref);
          EXPECT_LE(max_scaled_error(dwte, plus(dwte0, dwte_ref), 1e-5, 1e-5), 1.0);
          if (with_wpe) {
            EXPECT_LE(max_scaled_error(dwpe, plus(dwpe0, dwpe_ref), 1e-5, 1e-5), 1.0);
          } else {
            EXPECT_EQ(dwpe, dwpe0);
          }
        }
}

TEST(Embedding, RepeatedIdsAccumulate) {
  const int64_t hidden = 5;
  std::vector<int32_t> tokens = {3, 3, 3, 7};
  std::vector<float> dout(4 * hidden, 1.0f), dwte(kVocab * hidden, 0.0f);
  embedding_backward(tokens.data(), nullptr, dout.data(), dwte.data(), nullptr, 4, hidden, 0, kVocab);
  for (int64_t c = 0; c < hidden; ++c) {
    EXPECT_EQ(dwte[3 * hidden + c], 3.0f);
    EXPECT_EQ(dwte[7 * hidden + c], 1.0f);
    EXPECT_EQ(dwte[0 * hidden + c], 0.0f);
  }
}

// Vocab parallelism: each shard sees only its ids. The shards' outputs sum to the full lookup, foreign
// ids give zero rows, and each shard's gradient is (bitwise) its slice of the full gradient.
TEST(Embedding, VocabShardsMatchSlicesOfTheFullResult) {
  const int64_t rows = 40, hidden = 33;
  auto tokens = random_ids(rows, kVocab, 21);
  auto wte = random_vector(kVocab * hidden, 22);
  auto dout = random_vector(rows * hidden, 23);
  std::vector<float> full(rows * hidden), dwte_full(kVocab * hidden, 0.0f);
  embedding_forward(tokens.data(), nullptr, wte.data(), nullptr, full.data(), rows, hidden, 0, kVocab);
  embedding_backward(tokens.data(), nullptr, dout.data(), dwte_full.data(), nullptr, rows, hidden, 0, kVocab);

  std::vector<float> sum(rows * hidden, 0.0f);
  const int64_t bounds[] = {0, 4, 9, kVocab};
  for (int s = 0; s < 3; ++s) {
    const int64_t vb = bounds[s], ve = bounds[s + 1];
    std::vector<float> out(rows * hidden, -1.0f), dwte((ve - vb) * hidden, 0.0f);
    embedding_forward(tokens.data(), nullptr, wte.data() + vb * hidden, nullptr, out.data(), rows, hidden, vb, ve);
    embedding_backward(tokens.data(), nullptr, dout.data(), dwte.data(), nullptr, rows, hidden, vb, ve);
    for (int64_t t = 0; t < rows; ++t) {
      const bool mine = tokens[t] >= vb && tokens[t] < ve;
      for (int64_t c = 0; c < hidden; ++c) {
        if (!mine) {
          ASSERT_EQ(out[t * hidden + c], 0.0f);
        }
        sum[t * hidden + c] += out[t * hidden + c];
      }
    }
    EXPECT_TRUE(bitwise_equal(dwte.data(), dwte_full.data() + vb * hidden, dwte.size())) << "shard " << s;
  }
  EXPECT_EQ(sum, full);
}

TEST(Embedding, BackwardIsDeterministicAcrossThreadCounts) {
  const int64_t rows = 300, hidden = 150;  // three column blocks, the last one ragged
  auto tokens = random_ids(rows, kVocab, 31);
  auto positions = random_ids(rows, kMaxPos, 32);
  auto dout = random_vector(rows * hidden, 33);
  const int saved = omp_get_max_threads();
  std::vector<float> dwte1, dwpe1;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> dwte(kVocab * hidden, 0.5f), dwpe(kMaxPos * hidden, -0.5f);
    embedding_backward(tokens.data(), positions.data(), dout.data(), dwte.data(), dwpe.data(), rows, hidden, 0,
                       kVocab);
    if (threads == 1) {
      dwte1 = dwte, dwpe1 = dwpe;
    } else {
      EXPECT_TRUE(bitwise_equal(dwte.data(), dwte1.data(), dwte.size())) << threads << " threads";
      EXPECT_TRUE(bitwise_equal(dwpe.data(), dwpe1.data(), dwpe.size())) << threads << " threads";
    }
  }
  omp_set_num_threads(saved);
}

TEST(Embedding, PositionsRequiredWithWpe) {
  std::vector<int32_t> tokens = {0};
  std::vector<float> wte(4), wpe(4), out(4);
  EXPECT_THROW(embedding_forward(tokens.data(), nullptr, wte.data(), wpe.data(), out.data(), 1, 4, 0, 1), Error);
  EXPECT_THROW(embedding_backward(tokens.data(), nullptr, out.data(), wte.data(), wpe.data(), 1, 4, 0, 1), Error);
}

}  // namespace
}  // namespace tessera::kernels
