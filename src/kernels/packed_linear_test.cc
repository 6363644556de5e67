#include "kernels/packed_linear.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "core/check.h"
#include "core/testing.h"
#include "kernels/cpu/packed_linear.h"

namespace tessera::kernels {
namespace {

using testing::max_scaled_error;
using testing::random_vector;

// y = x w^T + b in float64.
std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w, const float* b, int64_t rows,
                              int64_t in, int64_t out) {
  std::vector<double> y(rows * out);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double s = 0;
      for (int64_t k = 0; k < in; ++k) s += static_cast<double>(x[i * in + k]) * w[j * in + k];
      y[i * out + j] = s + (b ? b[j] : 0.0);
    }
  return y;
}

// Output counts around the 32-wide blocks, input sizes with and without a multiple of 16, rows across
// the 12-row tiles: the float64 product.
TEST(PackedLinear, MatchesFloat64Reference) {
  for (int64_t out : {1, 31, 32, 45, 97})
    for (int64_t in : {1, 7, 64, 100})
      for (int64_t rows : {1, 5, 12, 13, 30}) {
        SCOPED_TRACE(str_cat("out ", out, " in ", in, " rows ", rows));
        const auto x = random_vector(rows * in, 1), w = random_vector(out * in, 2), b = random_vector(out, 3);
        std::vector<float> packed(((out + 31) / 32) * in * 32), y(rows * out);
        cpu::pack_linear_weight(w.data(), packed.data(), out, in);
        for (const float* bias : {static_cast<const float*>(nullptr), b.data()}) {
          cpu::packed_linear_forward(x.data(), packed.data(), bias, y.data(), rows, in, out);
          EXPECT_LE(max_scaled_error(y, reference(x, w, bias, rows, in, out), 1e-5, 1e-5), 1.0);
        }
      }
}

// A row's outputs are the same bits alone, among others, and at one or two threads: a sequence's logits
// do not depend on the batch.
TEST(PackedLinear, RowsDoNotDependOnTheBatchOrThreads) {
  const int64_t out = 300, in = 96, rows = 29;
  const auto x = random_vector(rows * in, 4), w = random_vector(out * in, 5), b = random_vector(out, 6);
  Tensor xt = Tensor::empty({rows, in}), wt = Tensor::empty({out, in}), bt = Tensor::empty({out});
  std::copy(x.begin(), x.end(), xt.f32());
  std::copy(w.begin(), w.end(), wt.f32());
  std::copy(b.begin(), b.end(), bt.f32());
  const Tensor packed = pack_linear_weight(wt);
  const int threads = omp_get_max_threads();
  for (int t : {1, 2}) {
    omp_set_num_threads(t);
    Tensor all = Tensor::empty({rows, out});
    packed_linear_forward(xt, packed, bt, all);
    for (int64_t i : {0L, 11L, 12L, 28L}) {
      Tensor one = Tensor::empty({1, out});
      packed_linear_forward(xt.narrow(i, 1), packed, bt, one);
      for (int64_t j = 0; j < out; ++j) ASSERT_EQ(one.f32()[j], all.f32()[i * out + j]) << "row " << i << " output " << j;
    }
  }
  omp_set_num_threads(threads);
}

TEST(PackedLinear, RejectsMismatchedShapes) {
  const Tensor packed = pack_linear_weight(Tensor::zeros({40, 8}));
  EXPECT_EQ(packed.shape(), Shape({2, 8, 32}));
  EXPECT_THROW(packed_linear_forward(Tensor::zeros({2, 8}), packed, Tensor(), Tensor::empty({2, 70})), Error);
  EXPECT_THROW(packed_linear_forward(Tensor::zeros({2, 7}), packed, Tensor(), Tensor::empty({2, 40})), Error);
  EXPECT_THROW(packed_linear_forward(Tensor::zeros({2, 8}), packed, Tensor::zeros({39}), Tensor::empty({2, 40})),
               Error);
}

}  // namespace
}  // namespace tessera::kernels
