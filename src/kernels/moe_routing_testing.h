// Host vectors to and from tensors, for the MoE kernel tests (moe_routing_test.cc, moe_rows_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor.h"

namespace tessera::kernels::moe_testing {

inline Tensor f32(const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  EXPECT_EQ(t.numel(), static_cast<int64_t>(v.size()));
  if (!v.empty()) std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}
inline Tensor i32(const std::vector<int32_t>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::I32);
  EXPECT_EQ(t.numel(), static_cast<int64_t>(v.size()));
  if (!v.empty()) std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}
inline std::vector<float> floats(const Tensor& t) { return {t.f32(), t.f32() + t.numel()}; }
inline std::vector<int32_t> ints(const Tensor& t) { return {t.i32(), t.i32() + t.numel()}; }

inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace tessera::kernels::moe_testing
