// The CUDA token-layout copies (kernels/cuda/token_layout.cu) through the tensor entry points, on
// tensors on cuda:0, against the CPU bit for bit (they are copies): transposes of every element type,
// positions, Megatron's QKV split and merge, and the first id out of range (the smallest index when
// several are). Odd sizes throughout. Skipped, with CUDA's reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cuda/device_testing.h"
#include "kernels/tensor_ops.h"
#include "kernels/token_layout.h"

namespace tessera::cuda {
namespace {

using namespace testing;
using CudaTokenLayout = CudaKernelTest;

// A host tensor of `shape` and type t whose bytes all differ from their neighbours' (a transpose that
// puts an element, or a byte of it, in the wrong place shows).
Tensor patterned(const Shape& shape, DType t, uint32_t seed) {
  Tensor h = Tensor::empty(shape, t);
  std::mt19937 rng(seed);
  auto* bytes = static_cast<uint8_t*>(h.raw());
  for (size_t i = 0; i < h.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
  return h;
}

TEST_F(CudaTokenLayout, TransposeRowsMatchesTheCpuForEveryType) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {1, 9}, {7, 1}, {3, 5}, {33, 17}, {257, 130}}) {
    for (DType t : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64}) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " " << dtype_name(t));
      const Tensor src = patterned({rows, cols}, t, 1);
      Tensor dst = Tensor::zeros({cols, rows}, t), dst_gpu = to_device(dst);
      kernels::transpose_rows(to_device(src), dst_gpu);
      kernels::transpose_rows(src, dst);
      EXPECT_TRUE(same_bits(to_host(dst_gpu), dst));
    }
  }
}

TEST_F(CudaTokenLayout, FillPositionsMatchesTheCpu) {
  for (auto [seq, batch, first] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 0}, {5, 3, 0}, {129, 7, 11},
                                   {1, 64, 1023}, {1000, 1, 5}}) {
    SCOPED_TRACE(::testing::Message() << seq << "x" << batch << " from " << first);
    Tensor p = Tensor::zeros({seq * batch}, DType::I32), p_gpu = to_device(p);
    kernels::fill_positions(p_gpu, batch, first);
    kernels::fill_positions(p, batch, first);
    EXPECT_TRUE(same_bits(to_host(p_gpu), p));
  }
}

TEST_F(CudaTokenLayout, SplitAndMergeQkvMatchTheCpu) {
  // rows, groups, per_group, d
  for (auto [rows, groups, per_group, d] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 1, 1, 1}, {3, 2, 3, 5}, {17, 1, 4, 7}, {9, 4, 1, 64},
        {31, 3, 2, 33}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows, " << groups << " groups of " << per_group << "+2 heads of "
                                      << d);
    const Tensor qkv = random({rows, groups * (per_group + 2) * d}, 2);
    Tensor q = Tensor::zeros({rows, groups * per_group, d}), k = Tensor::zeros({rows, groups, d});
    Tensor v = Tensor::zeros({rows, groups, d});
    Tensor q_gpu = to_device(q), k_gpu = to_device(k), v_gpu = to_device(v);
    kernels::split_qkv(to_device(qkv), q_gpu, k_gpu, v_gpu, per_group);
    kernels::split_qkv(qkv, q, k, v, per_group);
    EXPECT_TRUE(same_bits(to_host(q_gpu), q)) << "q";
    EXPECT_TRUE(same_bits(to_host(k_gpu), k)) << "k";
    EXPECT_TRUE(same_bits(to_host(v_gpu), v)) << "v";

    Tensor back = Tensor::zeros(qkv.shape()), back_gpu = to_device(back);
    kernels::merge_qkv(q_gpu, k_gpu, v_gpu, back_gpu, per_group);
    kernels::merge_qkv(q, k, v, back, per_group);
    EXPECT_TRUE(same_bits(to_host(back_gpu), back)) << "merge";
    EXPECT_TRUE(same_bits(back, qkv)) << "merge inverts split";
  }
}

TEST_F(CudaTokenLayout, FirstIdOutsideMatchesTheCpu) {
  for (int64_t n : {1, 7, 1000, 300001}) {
    SCOPED_TRACE(n);
    Tensor ids = random_ids(n, 50, 3);
    auto expect_same = [&](int64_t lo, int64_t hi) {
      const kernels::IdOutside want = kernels::first_id_outside(ids, lo, hi);
      const kernels::IdOutside got = kernels::first_id_outside(to_device(ids), lo, hi);
      EXPECT_EQ(got.index, want.index) << "[" << lo << ", " << hi << ")";
      EXPECT_EQ(got.id, want.id) << "[" << lo << ", " << hi << ")";
    };
    expect_same(0, 50);   // all inside
    expect_same(0, 49);   // the first 49 (random places)
    expect_same(10, 40);  // many outside, on both sides: the smallest index wins
    // Offenders planted late and early: the earliest is found, whatever the threads' order.
    std::vector<int32_t> v(static_cast<size_t>(n), 5);
    v[static_cast<size_t>(n - 1)] = -3;
    if (n > 2) v[static_cast<size_t>(n / 2)] = 70;
    ids = kernels::from_host(v);
    expect_same(0, 50);
    expect_same(-5, 50);
  }
}

TEST_F(CudaTokenLayout, EmptyIdsHaveNoneOutside) {
  const kernels::IdOutside r = kernels::first_id_outside(Tensor::empty({0}, DType::I32, kGpu), 0, 1);
  EXPECT_EQ(r.index, -1);
}

}  // namespace
}  // namespace tessera::cuda
