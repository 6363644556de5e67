// Every collective of the MPI process group against values computed locally, at whatever world size
// mpirun gives (CTest runs 1, 2 and 4 ranks).
#include "comm/mpi_process_group.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "comm/mpi_test_main.h"
#include "core/testing.h"

namespace tessera::comm {
namespace {

const DType kDTypes[] = {DType::F32, DType::I32, DType::I64};
const int64_t kSizes[] = {0, 1, 7, 4099};

// Element i of rank r's data: small integers, so fp32 sums are exact in any order; int64 values also
// use the high bits, to show that no narrowing happens on the way.
int64_t value(DType dt, int r, int64_t i) {
  int64_t v = (r + 1) * (i % 7) - 3 * r + i % 3;
  return dt == DType::I64 ? v + (static_cast<int64_t>(r + 1) << 40) : v;
}

void set(const Tensor& t, int64_t i, int64_t v) {
  switch (t.dtype()) {
    case DType::F32: t.f32()[i] = static_cast<float>(v); break;
    case DType::I32: t.i32()[i] = static_cast<int32_t>(v); break;
    default: t.i64()[i] = v; break;
  }
}

int64_t get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return static_cast<int64_t>(t.f32()[i]);
    case DType::I32: return t.i32()[i];
    default: return t.i64()[i];
  }
}

Tensor make(DType dt, int64_t n, const std::function<int64_t(int64_t)>& f) {
  Tensor t = Tensor::empty({n}, dt);
  for (int64_t i = 0; i < n; ++i) set(t, i, f(i));
  return t;
}

// The first element where t differs from f, or -1.
int64_t first_mismatch(const Tensor& t, const std::function<int64_t(int64_t)>& f) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (get(t, i) != f(i)) return i;
  }
  return -1;
}

int64_t reduce(ReduceOp op, int size, const std::function<int64_t(int)>& of_rank) {
  int64_t acc = of_rank(0);
  for (int r = 1; r < size; ++r) acc = op == ReduceOp::Sum ? acc + of_rank(r) : std::max(acc, of_rank(r));
  return acc;
}

std::string label(DType dt, int64_t n, ReduceOp op = ReduceOp::Sum) {
  return str_cat(dtype_name(dt), " n=", n, op == ReduceOp::Sum ? " sum" : " max");
}

using ::tessera::testing::error_of;

TEST(MpiProcessGroup, WorldMatchesMpi) {
  auto world = make_mpi_world_group();
  EXPECT_EQ(world->name(), "world");
  EXPECT_EQ(world->rank(), MpiRuntime::world_rank());
  ASSERT_EQ(static_cast<int>(world->world_ranks().size()), world->size());
  for (int r = 0; r < world->size(); ++r) EXPECT_EQ(world->world_ranks()[r], r);
}

TEST(MpiProcessGroup, AllReduce) {
  auto g = make_mpi_world_group();
  for (DType dt : kDTypes)
    for (int64_t n : kSizes)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
        Tensor t = make(dt, n, [&](int64_t i) { return value(dt, g->rank(), i); });
        g->all_reduce(t, op);
        EXPECT_EQ(first_mismatch(t, [&](int64_t i) {
                    return reduce(op, g->size(), [&](int r) { return value(dt, r, i); });
                  }),
                  -1)
            << label(dt, n, op);
      }
}

TEST(MpiProcessGroup, AllGather) {
  auto g = make_mpi_world_group();
  for (DType dt : kDTypes)
    for (int64_t n : kSizes) {
      auto expected = [&](int64_t j) { return value(dt, static_cast<int>(j / n), j % n); };
      Tensor in = make(dt, n, [&](int64_t i) { return value(dt, g->rank(), i); });
      Tensor out = Tensor::zeros({g->size() * n}, dt);
      g->all_gather(in, out);
      EXPECT_EQ(first_mismatch(out, expected), -1) << label(dt, n);

      // In place: the input already sits in this rank's chunk of the output.
      Tensor whole = Tensor::zeros({g->size() * n}, dt);
      Tensor mine = whole.flat_range(g->rank() * n, n);
      mine.copy_from(in);
      g->all_gather(mine, whole);
      EXPECT_EQ(first_mismatch(whole, expected), -1) << "in place " << label(dt, n);
    }
}

TEST(MpiProcessGroup, ReduceScatter) {
  auto g = make_mpi_world_group();
  for (DType dt : kDTypes)
    for (int64_t n : kSizes)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
        Tensor in = make(dt, g->size() * n, [&](int64_t j) { return value(dt, g->rank(), j); });
        Tensor out = Tensor::zeros({n}, dt);
        g->reduce_scatter(in, out, op);
        EXPECT_EQ(first_mismatch(out, [&](int64_t i) {
                    return reduce(op, g->size(), [&](int r) { return value(dt, r, g->rank() * n + i); });
                  }),
                  -1)
            << label(dt, n, op);
      }
}

TEST(MpiProcessGroup, BroadcastFromLastRank) {
  auto g = make_mpi_world_group();
  const int root = g->size() - 1;
  for (DType dt : kDTypes)
    for (int64_t n : kSizes) {
      Tensor t = make(dt, n, [&](int64_t i) { return g->rank() == root ? value(dt, root, i) : -1; });
      g->broadcast(t, root);
      EXPECT_EQ(first_mismatch(t, [&](int64_t i) { return value(dt, root, i); }), -1) << label(dt, n);
    }
}

TEST(MpiProcessGroup, AllToAll) {
  auto g = make_mpi_world_group();
  const int me = g->rank(), size = g->size();
  for (DType dt : kDTypes)
    for (int64_t n : kSizes) {  // n elements per chunk
      // Element i of the chunk that rank `from` sends to rank `to`.
      auto element = [&](int from, int to, int64_t i) { return 1000 * from + 100 * to + i % 100; };
      Tensor in = make(dt, size * n, [&](int64_t j) { return element(me, static_cast<int>(j / n), j % n); });
      Tensor out = Tensor::zeros({size * n}, dt);
      g->all_to_all(in, out);
      EXPECT_EQ(first_mismatch(out, [&](int64_t j) { return element(static_cast<int>(j / n), me, j % n); }), -1)
          << label(dt, n);
    }
}

TEST(MpiProcessGroup, AllToAllVWithUnequalCounts) {
  auto g = make_mpi_world_group();
  const int me = g->rank(), size = g->size();
  // How many elements rank `from` sends to rank `to`: 0 to 3, some empty, never symmetric.
  auto count = [](int from, int to) -> int64_t { return (from + 2 * to) % 3 + (from == to ? 1 : 0); };
  auto element = [](int from, int to, int64_t i) -> int64_t { return 1000 * from + 100 * to + i; };
  for (DType dt : kDTypes) {
    std::vector<int64_t> send_counts, recv_counts;
    std::vector<int64_t> sent, expected;
    for (int r = 0; r < size; ++r) {
      send_counts.push_back(count(me, r));
      recv_counts.push_back(count(r, me));
      for (int64_t i = 0; i < count(me, r); ++i) sent.push_back(element(me, r, i));
      for (int64_t i = 0; i < count(r, me); ++i) expected.push_back(element(r, me, i));
    }
    Tensor in = make(dt, static_cast<int64_t>(sent.size()), [&](int64_t i) { return sent[i]; });
    Tensor out = Tensor::zeros({static_cast<int64_t>(expected.size())}, dt);
    g->all_to_all_v_async(in, send_counts, out, recv_counts)->wait();
    EXPECT_EQ(first_mismatch(out, [&](int64_t i) { return expected[i]; }), -1) << dtype_name(dt);
  }
}

TEST(MpiProcessGroup, SendRecvRing) {
  auto g = make_mpi_world_group();
  if (g->size() < 2) GTEST_SKIP() << "needs two ranks";
  const int me = g->rank(), size = g->size();
  const int next = (me + 1) % size, prev = (me + size - 1) % size;
  for (DType dt : kDTypes)
    for (int64_t n : kSizes) {
      Tensor out = make(dt, n, [&](int64_t i) { return value(dt, me, i); });
      Tensor in = Tensor::zeros({n}, dt);
      // Receive first so that no rank blocks in a send that nobody has posted a receive for.
      WorkHandle r = g->recv_async(in, prev, 7);
      WorkHandle s = g->send_async(out, next, 7);
      s->wait();
      while (!r->test()) {  // polling completes the receive too
      }
      EXPECT_TRUE(r->test());
      r->wait();  // a no-op now
      EXPECT_EQ(first_mismatch(in, [&](int64_t i) { return value(dt, prev, i); }), -1) << label(dt, n);
    }
  // Blocking forms in pairs (0 <-> 1, 2 <-> 3): the lower rank sends first.
  if ((me ^ 1) < size) {
    int peer = me ^ 1;
    Tensor mine = make(DType::F32, 5, [&](int64_t i) { return 10 * me + i; });
    Tensor theirs = Tensor::zeros({5});
    if (me < peer) {
      g->send(mine, peer, 3);
      g->recv(theirs, peer, 3);
    } else {
      g->recv(theirs, peer, 3);
      g->send(mine, peer, 3);
    }
    EXPECT_EQ(first_mismatch(theirs, [&](int64_t i) { return 10 * peer + i; }), -1);
  }
}

TEST(MpiProcessGroup, ManyOperationsInFlight) {
  auto g = make_mpi_world_group();
  const int me = g->rank(), size = g->size();
  Tensor a = make(DType::F32, 1000, [&](int64_t i) { return me + i; });
  Tensor b = make(DType::I64, 3, [&](int64_t i) { return me * 10 + i; });
  Tensor gathered = Tensor::zeros({size * 3}, DType::I64);
  Tensor c = make(DType::I32, 17, [&](int64_t i) { return me == 0 ? i : -1; });
  // Started in the same order on every rank, waited for in reverse.
  std::vector<WorkHandle> work;
  work.push_back(g->all_reduce_async(a, ReduceOp::Max));
  work.push_back(g->all_gather_async(b, gathered));
  work.push_back(g->broadcast_async(c, 0));
  for (auto it = work.rbegin(); it != work.rend(); ++it) (*it)->wait();
  EXPECT_EQ(first_mismatch(a, [&](int64_t i) { return size - 1 + i; }), -1);
  EXPECT_EQ(first_mismatch(gathered, [&](int64_t j) { return j / 3 * 10 + j % 3; }), -1);
  EXPECT_EQ(first_mismatch(c, [&](int64_t i) { return i; }), -1);
  for (auto& w : work) w->wait();  // a second wait is a no-op
}

TEST(MpiProcessGroup, DroppedHandleIsWaitedFor) {
  auto g = make_mpi_world_group();
  Tensor t = make(DType::F32, 64, [](int64_t i) { return i; });
  g->all_reduce_async(t);  // the handle dies here, and waits
  EXPECT_EQ(first_mismatch(t, [&](int64_t i) { return g->size() * i; }), -1);
}

TEST(MpiProcessGroup, SplitIntoEvenAndOdd) {
  auto world = make_mpi_world_group();
  const int me = world->rank(), size = world->size();
  // key = -rank: the new groups list their members in reverse.
  auto half = world->split(me % 2, -me, "parity");
  ASSERT_NE(half, nullptr);
  std::vector<int> expected;
  for (int r = size - 1; r >= 0; --r) {
    if (r % 2 == me % 2) expected.push_back(r);
  }
  EXPECT_EQ(half->name(), "parity");
  EXPECT_EQ(half->world_ranks(), expected);
  EXPECT_EQ(half->size(), static_cast<int>(expected.size()));
  EXPECT_EQ(expected[half->rank()], me);

  Tensor t = make(DType::I64, 1, [&](int64_t) { return me; });
  half->all_reduce(t);
  int64_t sum = 0;
  for (int r : expected) sum += r;
  EXPECT_EQ(t.i64()[0], sum);

  Tensor gathered = Tensor::zeros({half->size()}, DType::I64);
  half->all_gather(make(DType::I64, 1, [&](int64_t) { return me; }), gathered);
  for (int i = 0; i < half->size(); ++i) EXPECT_EQ(gathered.i64()[i], expected[i]);

  // Only even ranks join; odd ranks get no group. A split of a split works too.
  auto evens = world->split(me % 2 == 0 ? 0 : -1, me, "evens");
  EXPECT_EQ(evens == nullptr, me % 2 == 1);
  auto again = half->split(0, 0, "same");
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->world_ranks(), expected);
}

TEST(MpiProcessGroup, BadArgumentsThrowOnEveryRankWithoutHanging) {
  auto g = make_mpi_world_group();
  const int size = g->size();
  Tensor four = Tensor::zeros({4});
  Tensor wrong = Tensor::zeros({4 * size + 1});

  std::string e = error_of([&] { g->all_gather(four, wrong); });
  EXPECT_NE(e.find("all_gather on group world"), std::string::npos) << e;
  EXPECT_NE(e.find(str_cat("out has ", 4 * size + 1, " elements")), std::string::npos) << e;
  EXPECT_NE(e.find(str_cat("size() * in.numel() = ", size, " * 4 = ", 4 * size)), std::string::npos) << e;

  e = error_of([&] { g->reduce_scatter(wrong, four); });
  EXPECT_NE(e.find("reduce_scatter on group world: in has"), std::string::npos) << e;

  e = error_of([&] { g->all_to_all(four, wrong); });
  EXPECT_NE(e.find("all_to_all on group world"), std::string::npos) << e;

  e = error_of([&] { g->all_to_all_v_async(four, std::vector<int64_t>(size + 1, 0), four, {4}); });
  EXPECT_NE(e.find(str_cat("send_counts has ", size + 1, " entries, expected one per rank = ", size)),
            std::string::npos)
      << e;

  e = error_of([&] { g->all_reduce(Tensor::zeros({3}, DType::BF16)); });
  EXPECT_NE(e.find("dtype bf16"), std::string::npos) << e;

  e = error_of([&] { g->all_gather(four, Tensor::zeros({4 * size}, DType::I64)); });
  EXPECT_NE(e.find("in has dtype fp32 but out has dtype int64"), std::string::npos) << e;

  e = error_of([&] { g->broadcast(four, size); });
  EXPECT_NE(e.find(str_cat("root ", size, " is not a rank of the group (size ", size, ")")), std::string::npos)
      << e;

  e = error_of([&] { g->send(four, g->rank(), 0); });
  EXPECT_NE(e.find("is this rank"), std::string::npos) << e;

  e = error_of([&] { g->all_reduce(Tensor()); });
  EXPECT_NE(e.find("undefined tensor"), std::string::npos) << e;

  // Nothing was started, so the group is still in step on every rank.
  Tensor one = make(DType::I32, 1, [](int64_t) { return 1; });
  g->all_reduce(one);
  EXPECT_EQ(one.i32()[0], size);
}

TEST(MpiProcessGroup, ShortMessageIsAnError) {
  auto g = make_mpi_world_group();
  if (g->size() < 2) GTEST_SKIP() << "needs two ranks";
  if (g->rank() == 0) g->send(Tensor::zeros({3}), 1, 0);
  if (g->rank() == 1) {
    std::string e = error_of([&] { g->recv(Tensor::zeros({5}), 0, 0); });
    EXPECT_NE(e.find("recv on group world: received 3 elements from rank 0, expected 5"), std::string::npos) << e;
  }
  g->barrier();
}

TEST(MpiProcessGroup, RecentCollectivesNameTheLastOperations) {
  auto g = make_mpi_world_group();
  auto sub = g->split(0, 0, "forensics");
  sub->all_reduce(Tensor::zeros({8}));
  sub->broadcast(Tensor::zeros({2}, DType::I64), 0);
  std::string log = recent_collectives();
  EXPECT_NE(log.find("  #1 all_reduce on group forensics, 32 bytes, done\n"
                     "  #2 broadcast on group forensics, 16 bytes, done"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace tessera::comm
