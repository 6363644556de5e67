// The residual forms of the norms' forward (kernels/norms.h: residual_layernorm_forward and
// residual_rmsnorm_forward, x += residual and then the norm of x in one pass): against float64 references
// of the norm of the sum, and bit for bit what the transformer layer computed before it used them
// (add_into, then the norm), which keeps whole-model losses on the CPU the same bits; bad shapes refused
// with the kernel and the operand named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/testing.h"
#include "kernels/elementwise.h"
#include "kernels/norms.h"

namespace tessera::kernels {
namespace {

using testing::max_scaled_error;
using Vec = std::vector<double>;

constexpr float kEps = 1e-5f;

// Odd column counts (not multiples of the vector width), one row and several.
const std::pair<int64_t, int64_t> kShapes[] = {{1, 1}, {1, 7}, {3, 33}, {2, 768}, {70, 33}};

Tensor random(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(shape);
  auto v = testing::random_vector(static_cast<size_t>(t.numel()), seed, lo, hi);
  if (!v.empty()) std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

Vec to_vec(const Tensor& t) { return Vec(t.f32(), t.f32() + t.numel()); }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// The norm of each row of s (float64), LayerNorm when `centre`, else RMSNorm; b may be empty.
Vec norm_ref(const Vec& s, const Vec& w, const Vec& b, int64_t rows, int64_t cols, bool centre) {
  Vec y(s.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* sr = &s[r * cols];
    double mean = 0, var = 0;
    if (centre) {
      for (int64_t c = 0; c < cols; ++c) mean += sr[c];
      mean /= cols;
    }
    for (int64_t c = 0; c < cols; ++c) var += (sr[c] - mean) * (sr[c] - mean);
    const double rstd = 1 / std::sqrt(var / cols + kEps);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = (sr[c] - mean) * rstd * w[c] + (b.empty() ? 0.0 : b[c]);
  }
  return y;
}

TEST(ResidualNorms, LayerNormOfTheSumMatchesReference) {
  for (auto [rows, cols] : kShapes) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
    // An offset mean, as residual streams have.
    const Tensor x0 = random({rows, cols}, 1, 0.5f, 2.5f), res = random({rows, cols}, 2);
    const Tensor w = random({cols}, 3, 0.5f, 1.5f), b = random({cols}, 4);
    Tensor x = x0.clone(), y = Tensor::empty({rows, cols}), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
    residual_layernorm_forward(x, res, w, b, y, mean, rstd, kEps);
    Vec sum(x0.numel());
    for (int64_t i = 0; i < x0.numel(); ++i) sum[i] = static_cast<double>(x0.f32()[i]) + res.f32()[i];
    // x holds the sum, each element one fp32 add; y the norm of the exact sum to fp32 accuracy.
    EXPECT_LE(max_scaled_error(to_vec(x), sum, 1e-7, 1e-7), 1.0);
    EXPECT_LE(max_scaled_error(to_vec(y), norm_ref(sum, to_vec(w), to_vec(b), rows, cols, true), 1e-5, 1e-5), 1.0);
  }
}

TEST(ResidualNorms, RmsNormOfTheSumMatchesReference) {
  for (auto [rows, cols] : kShapes) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
    const Tensor x0 = random({rows, cols}, 5), res = random({rows, cols}, 6), w = random({cols}, 7, 0.5f, 1.5f);
    Tensor x = x0.clone(), y = Tensor::empty({rows, cols}), rstd = Tensor::empty({rows});
    residual_rmsnorm_forward(x, res, w, y, rstd, kEps);
    Vec sum(x0.numel());
    for (int64_t i = 0; i < x0.numel(); ++i) sum[i] = static_cast<double>(x0.f32()[i]) + res.f32()[i];
    EXPECT_LE(max_scaled_error(to_vec(x), sum, 1e-7, 1e-7), 1.0);
    EXPECT_LE(max_scaled_error(to_vec(y), norm_ref(sum, to_vec(w), {}, rows, cols, false), 1e-5, 1e-5), 1.0);
  }
}

// What the transformer layer did before: add_into, then the norm on its own. Every output the same bits,
// for fp32 and rounded (16-bit) outputs, with and without a bias.
TEST(ResidualNorms, SameBitsAsAddThenNorm) {
  for (auto [rows, cols] : kShapes) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
    const Tensor x0 = random({rows, cols}, 8, -3.0f, 5.0f), res = random({rows, cols}, 9);
    const Tensor w = random({cols}, 10), b = random({cols}, 11);
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      for (bool bias : {true, false}) {
        Tensor x = x0.clone(), y = Tensor::empty({rows, cols}), mean = Tensor::empty({rows});
        Tensor rstd = Tensor::empty({rows});
        residual_layernorm_forward(x, res, w, bias ? b : Tensor(), y, mean, rstd, kEps, t);
        Tensor x_ref = x0.clone(), y_ref = Tensor::empty({rows, cols}), mean_ref = Tensor::empty({rows});
        Tensor rstd_ref = Tensor::empty({rows});
        add_into(x_ref, res);
        layernorm_forward(x_ref, w, bias ? b : Tensor(), y_ref, mean_ref, rstd_ref, kEps, t);
        EXPECT_TRUE(same_bits(x, x_ref)) << dtype_name(t) << " bias " << bias;
        EXPECT_TRUE(same_bits(y, y_ref)) << dtype_name(t) << " bias " << bias;
        EXPECT_TRUE(same_bits(mean, mean_ref)) << dtype_name(t) << " bias " << bias;
        EXPECT_TRUE(same_bits(rstd, rstd_ref)) << dtype_name(t) << " bias " << bias;
      }
      Tensor x = x0.clone(), y = Tensor::empty({rows, cols}), rstd = Tensor::empty({rows});
      residual_rmsnorm_forward(x, res, w, y, rstd, kEps, t);
      Tensor x_ref = x0.clone(), y_ref = Tensor::empty({rows, cols}), rstd_ref = Tensor::empty({rows});
      add_into(x_ref, res);
      rmsnorm_forward(x_ref, w, y_ref, rstd_ref, kEps, t);
      EXPECT_TRUE(same_bits(x, x_ref)) << "RMSNorm " << dtype_name(t);
      EXPECT_TRUE(same_bits(y, y_ref)) << "RMSNorm " << dtype_name(t);
      EXPECT_TRUE(same_bits(rstd, rstd_ref)) << "RMSNorm " << dtype_name(t);
    }
  }
}

void expect_error(const std::function<void()>& call, const std::string& text) {
  try {
    call();
    ADD_FAILURE() << "no error; expected " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(ResidualNorms, AResidualOfAnotherSizeIsRefused) {
  Tensor x = random({4, 8}, 12), w = random({8}, 13), y = Tensor::empty({4, 8}), row = Tensor::empty({4});
  expect_error([&] { residual_layernorm_forward(x, random({4, 7}, 14), w, Tensor(), y, row, row, kEps); },
               "residual_layernorm_forward: the residual has 28 elements, expected 32");
  expect_error([&] { residual_rmsnorm_forward(x, random({3, 8}, 15), w, y, row, kEps); },
               "residual_rmsnorm_forward: the residual has 24 elements, expected 32");
}

// A 16-bit output is the GPU's (its GEMMs read 16-bit buffers; kernels/cuda/cuda_norms_test.cc checks it
// there): the CPU, whose GEMMs read fp32, refuses one for every forward, naming the kernel.
TEST(ResidualNorms, A16BitOutputIsRefusedOnTheCpu) {
  Tensor x = random({4, 8}, 16), res = random({4, 8}, 17), w = random({8}, 18), row = Tensor::empty({4});
  const Tensor y = Tensor::empty({4, 8}, DType::BF16, Device::cpu());
  const std::string why = "output is written only on a GPU";
  expect_error([&] { layernorm_forward(x, w, Tensor(), y, row, row, kEps, DType::BF16); },
               "layernorm_forward: a bf16 " + why);
  expect_error([&] { rmsnorm_forward(x, w, y, row, kEps, DType::BF16); }, "rmsnorm_forward: a bf16 " + why);
  expect_error([&] { residual_layernorm_forward(x, res, w, Tensor(), y, row, row, kEps, DType::BF16); },
               "residual_layernorm_forward: a bf16 " + why);
  expect_error([&] { residual_rmsnorm_forward(x, res, w, y, row, kEps, DType::BF16); },
               "residual_rmsnorm_forward: a bf16 " + why);
}

}  // namespace
}  // namespace tessera::kernels
