// The single-process group: every collective is a copy or nothing, with the same argument checks as
// the MPI group.
#include "comm/process_group.h"
#include "core/testing.h"

#include <gtest/gtest.h>

#include <functional>

namespace tessera::comm {
namespace {

using ::tessera::testing::error_of;

Tensor iota(int64_t n, DType dt = DType::F32) {
  Tensor t = Tensor::empty({n}, dt);
  for (int64_t i = 0; i < n; ++i) {
    if (dt == DType::F32) t.f32()[i] = static_cast<float>(i);
    if (dt == DType::I64) t.i64()[i] = i;
  }
  return t;
}

TEST(SingleProcessGroup, CollectivesAreCopies) {
  auto g = make_single_process_group("tensor");
  EXPECT_EQ(g->rank(), 0);
  EXPECT_EQ(g->size(), 1);
  EXPECT_EQ(g->name(), "tensor");
  EXPECT_EQ(g->world_ranks(), std::vector<int>{0});

  Tensor t = iota(5);
  g->all_reduce(t, ReduceOp::Max);
  g->broadcast(t, 0);
  EXPECT_EQ(t.f32()[4], 4.0f);

  Tensor out = Tensor::zeros({5});
  g->all_gather(t, out);
  EXPECT_EQ(out.f32()[3], 3.0f);
  out.zero_();
  g->reduce_scatter(t, out);
  EXPECT_EQ(out.f32()[3], 3.0f);
  out.zero_();
  g->all_to_all(t, out);
  EXPECT_EQ(out.f32()[3], 3.0f);
  Tensor longs = iota(3, DType::I64), got = Tensor::zeros({3}, DType::I64);
  g->all_to_all_v_async(longs, {3}, got, {3})->wait();
  EXPECT_EQ(got.i64()[2], 2);
  Tensor empty = Tensor::empty({0});
  g->all_gather(empty, Tensor::empty({0}));
  g->barrier();
}

TEST(SingleProcessGroup, ErrorsNameTheOperationGroupAndSizes) {
  auto g = make_single_process_group("data");
  std::string e = error_of([&] { g->all_gather(iota(4), Tensor::zeros({5})); });
  EXPECT_EQ(e, "all_gather on group data: out has 5 elements, expected size() * in.numel() = 1 * 4 = 4");
  e = error_of([&] { g->reduce_scatter(iota(4), Tensor::zeros({2})); });
  EXPECT_EQ(e, "reduce_scatter on group data: in has 4 elements, expected size() * out.numel() = 1 * 2 = 2");
  e = error_of([&] { g->all_to_all_v_async(iota(4), {3}, Tensor::zeros({4}), {4}); });
  EXPECT_EQ(e, "all_to_all_v on group data: send_counts sum to 3 elements but the tensor has 4");
  e = error_of([&] { g->all_reduce(Tensor::zeros({2}, DType::BF16)); });
  EXPECT_NE(e.find("has dtype bf16; supported are fp32, int32 and int64"), std::string::npos) << e;
  e = error_of([&] { g->send(iota(2), 0, 0); });
  EXPECT_NE(e.find("send on group data: dst 0 is this rank"), std::string::npos) << e;
  e = error_of([&] { g->recv(iota(2), 0, 0); });
  EXPECT_NE(e.find("recv on group data: src 0 is this rank"), std::string::npos) << e;
  e = error_of([&] { g->broadcast(iota(2), 1); });
  EXPECT_NE(e.find("root 1 is not a rank of the group (size 1)"), std::string::npos) << e;
}

TEST(SingleProcessGroup, SplitMakesANewGroupOrNone) {
  auto g = make_single_process_group("world");
  auto sub = g->split(3, 0, "pipeline");
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->name(), "pipeline");
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(g->split(-1, 0, "none"), nullptr);
}

}  // namespace
}  // namespace tessera::comm
