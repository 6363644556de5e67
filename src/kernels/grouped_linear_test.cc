// The grouped linear layers (kernels/grouped_linear.h): forward and backward against float64 loops
// written here, with the layers' weights evenly spaced in one buffer (one batched GEMM) and scattered
// (group by group), with and without biases, in fp32 and with 16-bit inputs; the padding kernels
// against their definition.
#include "kernels/grouped_linear.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/testing.h"
#include "kernels/precision.h"

namespace tessera::kernels {
namespace {

using testing::max_scaled_error;
using testing::random_vector;

Tensor from(const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

std::vector<float> host(const Tensor& t) { return {t.f32(), t.f32() + t.numel()}; }

constexpr int64_t kGroups = 3, kRows = 5, kIn = 7, kOut = 6;

// The layers' parameters in one buffer: each group's weight [out, in] and bias [out] (and their
// gradients), either one constant stride apart (as a ParameterSet lays out experts: the batched GEMM)
// or at uneven offsets (group by group).
struct Layers {
  Tensor storage;
  std::vector<Tensor> w, b, dw, db;
};

Layers make_layers(bool evenly_spaced, uint64_t seed) {
  Layers l;
  const int64_t per_group = kOut * kIn + kOut + 3;  // weight, bias and a gap
  auto at = [&](int64_t g) { return g * per_group + (evenly_spaced ? 0 : 5 * g * g); };
  const int64_t grads = at(kGroups);
  l.storage = from(random_vector(2 * grads, seed), {2 * grads});
  for (int64_t g = 0; g < kGroups; ++g) {
    l.w.push_back(l.storage.flat_range(at(g), kOut * kIn).view({kOut, kIn}));
    l.b.push_back(l.storage.flat_range(at(g) + kOut * kIn, kOut));
    l.dw.push_back(l.storage.flat_range(grads + at(g), kOut * kIn).view({kOut, kIn}));
    l.db.push_back(l.storage.flat_range(grads + at(g) + kOut * kIn, kOut));
  }
  return l;
}

double rounded(DType t, float v) { return round_to(t, v); }

// y_g = x_g w_g^T (+ b_g) in float64, the GEMM inputs rounded to `t` as the kernel multiplies them.
std::vector<double> reference_forward(const std::vector<float>& x, const Layers& l, bool bias, DType t) {
  std::vector<double> y(kGroups * kRows * kOut);
  for (int64_t g = 0; g < kGroups; ++g)
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t o = 0; o < kOut; ++o) {
        double s = bias ? l.b[g].f32()[o] : 0.0;
        for (int64_t i = 0; i < kIn; ++i)
          s += rounded(t, x[(g * kRows + r) * kIn + i]) * rounded(t, l.w[g].f32()[o * kIn + i]);
        y[(g * kRows + r) * kOut + o] = s;
      }
  return y;
}

class GroupedLinear : public ::testing::TestWithParam<std::tuple<bool, DType>> {};

TEST_P(GroupedLinear, ForwardMatchesFloat64Reference) {
  const auto [evenly_spaced, type] = GetParam();
  const Layers l = make_layers(evenly_spaced, 11);
  const auto x = random_vector(kGroups * kRows * kIn, 1);
  for (bool bias : {false, true}) {
    Tensor y = Tensor::empty({kGroups, kRows, kOut});
    grouped_linear_forward(from(x, {kGroups, kRows, kIn}), l.w, bias ? l.b : std::vector<Tensor>{}, y, type);
    EXPECT_LE(max_scaled_error(host(y), reference_forward(x, l, bias, type), 1e-5, 1e-5), 1.0)
        << "bias " << bias;
  }
}

TEST_P(GroupedLinear, BackwardMatchesFloat64Reference) {
  const auto [evenly_spaced, type] = GetParam();
  Layers l = make_layers(evenly_spaced, 21);
  const auto x = random_vector(kGroups * kRows * kIn, 2), dy = random_vector(kGroups * kRows * kOut, 3);
  std::vector<std::vector<float>> dw0, db0;
  for (int64_t g = 0; g < kGroups; ++g) dw0.push_back(host(l.dw[g])), db0.push_back(host(l.db[g]));
  Tensor dx = Tensor::empty({kGroups, kRows, kIn});
  grouped_linear_backward(from(dy, {kGroups, kRows, kOut}), from(x, {kGroups, kRows, kIn}), l.w, dx, l.dw, l.db,
                          type);
  std::vector<double> dx_ref(kGroups * kRows * kIn, 0.0);
  for (int64_t g = 0; g < kGroups; ++g) {
    std::vector<double> dw_ref(dw0[g].begin(), dw0[g].end()), db_ref(db0[g].begin(), db0[g].end());
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t o = 0; o < kOut; ++o) {
        const float d = dy[(g * kRows + r) * kOut + o];
        db_ref[o] += d;  // the bias gradient sums the unrounded dy
        for (int64_t i = 0; i < kIn; ++i) {
          dx_ref[(g * kRows + r) * kIn + i] += rounded(type, d) * rounded(type, l.w[g].f32()[o * kIn + i]);
          dw_ref[o * kIn + i] += rounded(type, d) * rounded(type, x[(g * kRows + r) * kIn + i]);
        }
      }
    EXPECT_LE(max_scaled_error(host(l.dw[g]), dw_ref, 1e-5, 1e-5), 1.0) << "dw of group " << g;
    EXPECT_LE(max_scaled_error(host(l.db[g]), db_ref, 1e-5, 1e-5), 1.0) << "db of group " << g;
  }
  EXPECT_LE(max_scaled_error(host(dx), dx_ref, 1e-5, 1e-5), 1.0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, GroupedLinear,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(DType::F32, DType::BF16)));

// The batched product (evenly spaced layers) gives the group-by-group one's numbers.
TEST(GroupedLinearLayouts, BatchedEqualsGroupByGroup) {
  Layers even = make_layers(true, 31), apart = make_layers(false, 32);
  for (int64_t g = 0; g < kGroups; ++g)
    for (auto [from_, to] : {std::pair{&even.w, &apart.w}, {&even.b, &apart.b}, {&even.dw, &apart.dw},
                             {&even.db, &apart.db}})
      (*to)[g].copy_from((*from_)[g]);
  const Tensor x = from(random_vector(kGroups * kRows * kIn, 4), {kGroups, kRows, kIn});
  const Tensor dy = from(random_vector(kGroups * kRows * kOut, 5), {kGroups, kRows, kOut});
  Tensor y_even = Tensor::empty({kGroups, kRows, kOut}), y_apart = Tensor::empty({kGroups, kRows, kOut});
  grouped_linear_forward(x, even.w, even.b, y_even);
  grouped_linear_forward(x, apart.w, apart.b, y_apart);
  EXPECT_LE(max_scaled_error(host(y_even), host(y_apart), 1e-6, 1e-6), 1.0);
  Tensor dx_even = Tensor::empty(x.shape()), dx_apart = Tensor::empty(x.shape());
  grouped_linear_backward(dy, x, even.w, dx_even, even.dw, even.db);
  grouped_linear_backward(dy, x, apart.w, dx_apart, apart.dw, apart.db);
  EXPECT_LE(max_scaled_error(host(dx_even), host(dx_apart), 1e-6, 1e-6), 1.0);
  for (int64_t g = 0; g < kGroups; ++g) {
    EXPECT_LE(max_scaled_error(host(even.dw[g]), host(apart.dw[g]), 1e-6, 1e-6), 1.0);
    EXPECT_LE(max_scaled_error(host(even.db[g]), host(apart.db[g]), 1e-6, 1e-6), 1.0);
  }
}

TEST(PadRowGroups, PadsWithZerosAndUnpadsBack) {
  const std::vector<int64_t> counts = {2, 0, 3};
  const auto x = random_vector(5 * 4, 6);
  const Tensor padded = pad_row_groups(from(x, {5, 4}), counts, 3);
  ASSERT_EQ(padded.shape(), (Shape{3, 3, 4}));
  const std::vector<int64_t> source = {0, 1, -1, -1, -1, -1, 2, 3, 4};  // row of x in each padded row
  for (int64_t r = 0; r < 9; ++r)
    for (int64_t j = 0; j < 4; ++j)
      EXPECT_EQ(padded.f32()[r * 4 + j], source[r] < 0 ? 0.0f : x[source[r] * 4 + j]) << r << "," << j;
  Tensor back = Tensor::empty({5, 4});
  unpad_row_groups(padded, counts, back);
  EXPECT_EQ(host(back), x);
  EXPECT_THROW(pad_row_groups(from(x, {5, 4}), counts, 2), Error);  // a group of 3 rows does not fit in 2
  EXPECT_THROW(pad_row_groups(from(x, {5, 4}), {2, 2}, 3), Error);  // 4 rows, x has 5
}

TEST(GroupedLinearLayouts, RefusesMismatchedLayers) {
  Layers l = make_layers(false, 41);
  const Tensor x = Tensor::zeros({kGroups - 1, kRows, kIn});
  Tensor y = Tensor::empty({kGroups - 1, kRows, kOut});
  EXPECT_THROW(grouped_linear_forward(x, l.w, {}, y), Error);  // 3 weights for 2 groups
  l.w[1] = Tensor::zeros({kOut, kIn + 1});
  const Tensor x3 = Tensor::zeros({kGroups, kRows, kIn});
  Tensor y3 = Tensor::empty({kGroups, kRows, kOut});
  EXPECT_THROW(grouped_linear_forward(x3, l.w, {}, y3), Error);  // weights of two shapes
}

}  // namespace
}  // namespace tessera::kernels
