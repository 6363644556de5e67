// The linear layer's bias gradient on the CPU (kernels/cpu/linear.cc): db += the column sums of dy, in
// kernels/math/column_sums.h's fixed order (the GPU's, kernels/cuda/cuda_linear_test.cc checks them
// against each other bit for bit): against float64 sums, against that order written out plainly bit for
// bit, independent of the thread count, and the same whether dy is rounded for bf16 GEMMs in the same
// pass or not.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/testing.h"
#include "kernels/cpu/linear.h"
#include "kernels/math/column_sums.h"

namespace tessera::kernels {
namespace {

using testing::max_scaled_error;
using testing::random_vector;

// Rows: none, one, one chunk less one, exactly one chunk, one more, many with a ragged last chunk.
const int64_t kRows[] = {0, 1, 31, 32, 33, 301, 4099};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(LinearBiasGrad, MatchesFloat64Sums) {
  const int64_t out = 67;
  for (int64_t rows : kRows) {
    SCOPED_TRACE(rows);
    const auto dy = random_vector(std::max<int64_t>(rows * out, 1), 1);
    auto db = random_vector(out, 2);  // accumulated into
    std::vector<double> want(db.begin(), db.end());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < out; ++c) want[c] += dy[r * out + c];
    cpu::linear_bias_grad(dy.data(), db.data(), rows, out);
    // fp32 partials over 32 rows: an error of about an ulp of the sum of |dy| (half a unit a row) at most.
    EXPECT_LE(max_scaled_error(db, want, 1e-6 + 6e-8 * static_cast<double>(rows), 1e-6), 1.0);
  }
}

TEST(LinearBiasGrad, SumsInTheSharedOrder) {
  const int64_t out = 45;
  for (int64_t rows : kRows) {
    SCOPED_TRACE(rows);
    const auto dy = random_vector(std::max<int64_t>(rows * out, 1), 3);
    auto db = random_vector(out, 4);
    auto want = db;
    for (int64_t c = 0; c < out; ++c) {
      double acc = 0;
      for (int64_t k = 0; k < math::column_sum_chunks(rows); ++k) {
        float partial = 0.0f;
        for (int64_t r = k * math::kColumnSumRows; r < std::min(rows, (k + 1) * math::kColumnSumRows); ++r)
          partial += dy[r * out + c];
        acc += partial;
      }
      want[c] += static_cast<float>(acc);
    }
    cpu::linear_bias_grad(dy.data(), db.data(), rows, out);
    EXPECT_TRUE(same_bits(db, want));
  }
}

TEST(LinearBiasGrad, IndependentOfTheThreadCountAndOfRoundingDy) {
  const int64_t rows = 4099, in = 5, out = 300;
  const auto dy = random_vector(rows * out, 5), x = random_vector(rows * in, 6), w = random_vector(out * in, 7);
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> db(out, 0.5f);
    cpu::linear_bias_grad(dy.data(), db.data(), rows, out);
    results.push_back(db);
    // With bf16 GEMM inputs, dy is rounded in the bias gradient's pass: the sums are the fp32 dy's.
    std::vector<float> dx(rows * in), dw(out * in, 0.0f), db16(out, 0.5f);
    cpu::linear_backward(dy.data(), x.data(), w.data(), dx.data(), dw.data(), db16.data(), rows, in, out, false,
                         DType::BF16, false, false, false);
    results.push_back(db16);
  }
  omp_set_num_threads(saved);
  for (size_t i = 1; i < results.size(); ++i) EXPECT_TRUE(same_bits(results[i], results[0])) << i;
}

}  // namespace
}  // namespace tessera::kernels
