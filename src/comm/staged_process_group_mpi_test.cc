// The staged process group (device tensors through host buffers over MPI) against the plain MPI group:
// every collective and send/receive, fp32, int32 and int64, on tensors "on cuda:0" (host memory
// standing in for a GPU's, comm/staging_testing.h), gives the plain group's results bit for bit, at
// whatever world size mpirun gives (CTest runs 1, 2, 4 and 8 ranks).
#include "comm/staged_process_group.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "comm/mpi_process_group.h"
#include "comm/mpi_test_main.h"
#include "comm/staging_testing.h"
#include "core/testing.h"

namespace tessera::comm {
namespace {

using testing::from_fake_device;
using testing::kFakeGpu;
using testing::on_fake_device;
using ::tessera::testing::error_of;

const DType kDTypes[] = {DType::F32, DType::I32, DType::I64};
const int64_t kSizes[] = {0, 1, 7, 4099};

// Element i of rank r's data; int64 values use the high bits too (no narrowing on the way). fp32
// values are not all integers, so a sum in another order would show.
Tensor make(DType dt, int64_t n, const std::function<int64_t(int64_t)>& f) {
  Tensor t = Tensor::empty({n}, dt, Device::cpu());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = f(i);
    switch (dt) {
      case DType::F32: t.host_f32()[i] = static_cast<float>(v) * 0.37f; break;
      case DType::I32: t.host_i32()[i] = static_cast<int32_t>(v); break;
      default: t.host_i64()[i] = v + (int64_t{1} << 40); break;
    }
  }
  return t;
}

int64_t value(int r, int64_t i) { return (r + 1) * (i % 7) - 3 * r + i % 3; }

std::string label(DType dt, int64_t n, const char* what = "") { return str_cat(dtype_name(dt), " n=", n, what); }

// The device tensor holds the host tensor's bytes, and is on the (fake) device.
::testing::AssertionResult same(const Tensor& expected_host, const Tensor& device) {
  if (device.device() != kFakeGpu) return ::testing::AssertionFailure() << "on " << device.device().str();
  Tensor got = from_fake_device(device);
  if (got.nbytes() != expected_host.nbytes()) return ::testing::AssertionFailure() << "sizes differ";
  if (std::memcmp(got.host_raw(), expected_host.host_raw(), got.nbytes()) != 0)
    return ::testing::AssertionFailure() << "bytes differ from the plain MPI group's";
  return ::testing::AssertionSuccess();
}

class StagedProcessGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    plain_ = make_mpi_world_group();
    staged_ = make_staged_process_group(make_mpi_world_group(), std::make_shared<testing::MemcpyStaging>());
  }
  int me() const { return plain_->rank(); }
  int size() const { return plain_->size(); }

  testing::FakeDeviceScope fake_;
  std::unique_ptr<ProcessGroup> plain_, staged_;
};

TEST_F(StagedProcessGroupTest, KeepsTheWrappedGroupsIdentity) {
  EXPECT_EQ(staged_->name(), "world");
  EXPECT_EQ(staged_->rank(), plain_->rank());
  EXPECT_EQ(staged_->size(), plain_->size());
  EXPECT_EQ(staged_->world_ranks(), plain_->world_ranks());
}

TEST_F(StagedProcessGroupTest, PlainGroupRefusesDeviceTensors) {
  // Why the staging exists: Debian's Open MPI cannot read a GPU's memory, and the group says so.
  Tensor d = on_fake_device(make(DType::F32, 3, [&](int64_t i) { return value(me(), i); }));
  EXPECT_EQ(error_of([&] { plain_->all_reduce(d); }),
            "all_reduce on group world: t is on cuda:0; this process group works on cpu tensors");
}

TEST_F(StagedProcessGroupTest, AllReduce) {
  for (DType dt : kDTypes)
    for (int64_t n : kSizes)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
        Tensor ref = make(dt, n, [&](int64_t i) { return value(me(), i); });
        Tensor d = on_fake_device(ref);
        plain_->all_reduce(ref, op);
        staged_->all_reduce(d, op);
        EXPECT_TRUE(same(ref, d)) << label(dt, n, op == ReduceOp::Sum ? " sum" : " max");
      }
}

TEST_F(StagedProcessGroupTest, AllGather) {
  for (DType dt : kDTypes)
    for (int64_t n : kSizes) {
      Tensor in = make(dt, n, [&](int64_t i) { return value(me(), i); });
      Tensor ref = Tensor::zeros({size() * n}, dt, Device::cpu());
      plain_->all_gather(in, ref);
      Tensor out = Tensor::zeros({size() * n}, dt, kFakeGpu);
      staged_->all_gather(on_fake_device(in), out);
      EXPECT_TRUE(same(ref, out)) << label(dt, n);

      // In place on the device: the input is this rank's chunk of the output.
      Tensor whole = Tensor::zeros({size() * n}, dt, kFakeGpu);
      std::memcpy(whole.flat_range(me() * n, n).raw(), in.host_raw(), in.nbytes());
      staged_->all_gather(whole.flat_range(me() * n, n), whole);
      EXPECT_TRUE(same(ref, whole)) << label(dt, n, " in place");

      // A host input passes straight through beside a device output.
      Tensor mixed = Tensor::zeros({size() * n}, dt, kFakeGpu);
      staged_->all_gather(in, mixed);
      EXPECT_TRUE(same(ref, mixed)) << label(dt, n, " host in, device out");
    }
}

TEST_F(StagedProcessGroupTest, ReduceScatter) {
  for (DType dt : kDTypes)
    for (int64_t n : kSizes)
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
        Tensor in = make(dt, size() * n, [&](int64_t j) { return value(me(), j); });
        Tensor ref = Tensor::zeros({n}, dt, Device::cpu());
        plain_->reduce_scatter(in, ref, op);
        Tensor out = Tensor::zeros({n}, dt, kFakeGpu);
        staged_->reduce_scatter(on_fake_device(in), out, op);
        EXPECT_TRUE(same(ref, out)) << label(dt, n, op == ReduceOp::Sum ? " sum" : " max");
      }
}

TEST_F(StagedProcessGroupTest, BroadcastFromFirstAndLastRank) {
  for (int root : {0, size() - 1})
    for (DType dt : kDTypes)
      for (int64_t n : kSizes) {
        Tensor ref = make(dt, n, [&](int64_t i) { return me() == root ? value(root, i) : -1; });
        Tensor d = on_fake_device(ref);
        plain_->broadcast(ref, root);
        staged_->broadcast(d, root);
        EXPECT_TRUE(same(ref, d)) << label(dt, n) << " root " << root;
      }
}

TEST_F(StagedProcessGroupTest, AllToAll) {
  for (DType dt : kDTypes)
    for (int64_t n : kSizes) {
      Tensor in = make(dt, size() * n, [&](int64_t j) { return 1000 * me() + 100 * (j / (n ? n : 1)) + j % 100; });
      Tensor ref = Tensor::zeros({size() * n}, dt, Device::cpu());
      plain_->all_to_all(in, ref);
      Tensor out = Tensor::zeros({size() * n}, dt, kFakeGpu);
      staged_->all_to_all(on_fake_device(in), out);
      EXPECT_TRUE(same(ref, out)) << label(dt, n);
    }
}

TEST_F(StagedProcessGroupTest, AllToAllVWithUnequalCounts) {
  auto count = [](int from, int to) -> int64_t { return (from + 2 * to) % 3 + (from == to ? 1 : 0); };
  std::vector<int64_t> send_counts, recv_counts;
  int64_t sent = 0, received = 0;
  for (int r = 0; r < size(); ++r) {
    send_counts.push_back(count(me(), r));
    recv_counts.push_back(count(r, me()));
    sent += count(me(), r);
    received += count(r, me());
  }
  for (DType dt : kDTypes) {
    Tensor in = make(dt, sent, [&](int64_t i) { return 1000 * me() + i; });
    Tensor ref = Tensor::zeros({received}, dt, Device::cpu());
    plain_->all_to_all_v_async(in, send_counts, ref, recv_counts)->wait();
    Tensor out = Tensor::zeros({received}, dt, kFakeGpu);
    staged_->all_to_all_v_async(on_fake_device(in), send_counts, out, recv_counts)->wait();
    EXPECT_TRUE(same(ref, out)) << dtype_name(dt);
  }
}

TEST_F(StagedProcessGroupTest, SendRecvRingAsynchronous) {
  if (size() < 2) GTEST_SKIP() << "needs two ranks";
  const int next = (me() + 1) % size(), prev = (me() + size() - 1) % size();
  for (DType dt : kDTypes)
    for (int64_t n : kSizes) {
      Tensor mine = make(dt, n, [&](int64_t i) { return value(me(), i); });
      Tensor ref = Tensor::zeros({n}, dt, Device::cpu());
      WorkHandle r = plain_->recv_async(ref, prev, 5);
      plain_->send_async(mine, next, 5)->wait();
      r->wait();

      Tensor got = Tensor::zeros({n}, dt, kFakeGpu);
      WorkHandle staged_recv = staged_->recv_async(got, prev, 5);
      WorkHandle staged_send = staged_->send_async(on_fake_device(mine), next, 5);
      staged_send->wait();
      while (!staged_recv->test()) {  // test() that finds it complete copies the result back
      }
      EXPECT_TRUE(same(ref, got)) << label(dt, n);
      staged_recv->wait();  // a no-op now
      EXPECT_TRUE(same(ref, got)) << label(dt, n, " after wait");
    }
}

TEST_F(StagedProcessGroupTest, BlockingSendRecvInPairs) {
  if ((me() ^ 1) >= size()) GTEST_SKIP() << "no partner rank at world size " << size();
  const int peer = me() ^ 1;
  Tensor mine = on_fake_device(make(DType::I64, 5, [&](int64_t i) { return 10 * me() + i; }));
  Tensor theirs = Tensor::zeros({5}, DType::I64, kFakeGpu);
  if (me() < peer) {
    staged_->send(mine, peer, 3);
    staged_->recv(theirs, peer, 3);
  } else {
    staged_->recv(theirs, peer, 3);
    staged_->send(mine, peer, 3);
  }
  EXPECT_TRUE(same(make(DType::I64, 5, [&](int64_t i) { return 10 * peer + i; }), theirs));
}

TEST_F(StagedProcessGroupTest, OverlappingOperationsEachGetTheirOwnBuffers) {
  // Several all-reduces in flight at once (bucketed gradient reduction), completed in reverse order.
  std::vector<Tensor> refs, devs;
  std::vector<WorkHandle> works;
  for (int b = 0; b < 4; ++b) {
    Tensor ref = make(DType::F32, 100 + b, [&](int64_t i) { return value(me(), i + b); });
    devs.push_back(on_fake_device(ref));
    plain_->all_reduce(ref);
    refs.push_back(ref);
    works.push_back(staged_->all_reduce_async(devs.back()));
  }
  for (int b = 3; b >= 0; --b) works[b]->wait();
  for (int b = 0; b < 4; ++b) EXPECT_TRUE(same(refs[b], devs[b])) << "bucket " << b;
  EXPECT_EQ(staging_stats(*staged_).buffers_allocated, 4);
}

TEST_F(StagedProcessGroupTest, BuffersAreReusedAndGrown) {
  Tensor small = on_fake_device(make(DType::F32, 1000, [&](int64_t i) { return value(me(), i); }));
  staged_->all_reduce(small);
  const StagingStats first = staging_stats(*staged_);
  EXPECT_EQ(first.buffers_allocated, 1);
  EXPECT_EQ(first.copies_to_host, 1);
  EXPECT_EQ(first.copies_to_device, 1);
  for (int step = 0; step < 3; ++step) staged_->all_reduce(small);
  EXPECT_EQ(staging_stats(*staged_).buffers_allocated, 1) << "the same size again reuses the buffer";
  EXPECT_EQ(staging_stats(*staged_).copies_to_host, 4);

  // Larger than the buffer: a new one replaces it (the pool does not keep both).
  Tensor large = on_fake_device(make(DType::F32, 100000, [&](int64_t i) { return value(me(), i); }));
  staged_->all_reduce(large);
  const StagingStats grown = staging_stats(*staged_);
  EXPECT_EQ(grown.buffers_allocated, 2);
  EXPECT_GE(grown.bytes_held, 100000 * 4);
  EXPECT_LT(grown.bytes_held, 100000 * 4 + first.bytes_held);
  staged_->all_reduce(small);  // fits the grown one
  EXPECT_EQ(staging_stats(*staged_).buffers_allocated, 2);

  // Host tensors pass straight through: no copies.
  Tensor host = make(DType::F32, 10, [&](int64_t i) { return value(me(), i); });
  staged_->all_reduce(host);
  EXPECT_EQ(staging_stats(*staged_).copies_to_host, 6);
  EXPECT_EQ(error_of([&] { staging_stats(*plain_); }), "staging_stats: group world is not a staged process group");
}

TEST_F(StagedProcessGroupTest, RefusedArgumentsReadAsThePlainGroupsAndGiveTheBuffersBack) {
  Tensor in = on_fake_device(make(DType::F32, 3, [&](int64_t i) { return i; }));
  Tensor out = Tensor::zeros({size() * 3 + 1}, DType::F32, kFakeGpu);
  EXPECT_EQ(error_of([&] { staged_->all_gather(in, out); }),
            str_cat("all_gather on group world: out has ", size() * 3 + 1, " elements, expected size() * in.numel() = ",
                    size(), " * 3 = ", size() * 3));
  const int64_t allocated = staging_stats(*staged_).buffers_allocated;
  Tensor ok = Tensor::zeros({size() * 3}, DType::F32, kFakeGpu);
  staged_->all_gather(in, ok);
  EXPECT_EQ(staging_stats(*staged_).buffers_allocated, allocated) << "the refused operation's buffers were reused";
  Tensor bf16 = Tensor::zeros({4}, DType::BF16, kFakeGpu);
  EXPECT_EQ(error_of([&] { staged_->all_reduce(bf16); }),
            "all_reduce on group world: t has dtype bf16; supported are fp32, int32 and int64");
}

TEST_F(StagedProcessGroupTest, DroppedHandleStillCopiesBack) {
  Tensor ref = make(DType::I32, 17, [&](int64_t i) { return value(me(), i); });
  Tensor d = on_fake_device(ref);
  plain_->all_reduce(ref);
  { WorkHandle dropped = staged_->all_reduce_async(d); }
  EXPECT_TRUE(same(ref, d));
}

TEST_F(StagedProcessGroupTest, SplitGroupsStageToo) {
  auto plain_half = plain_->split(me() % 2, me(), "half");
  auto staged_half = staged_->split(me() % 2, me(), "half");
  ASSERT_NE(staged_half, nullptr);
  EXPECT_EQ(staged_half->world_ranks(), plain_half->world_ranks());
  Tensor ref = make(DType::I64, 33, [&](int64_t i) { return value(me(), i); });
  Tensor d = on_fake_device(ref);
  plain_half->all_reduce(ref);
  staged_half->all_reduce(d);
  EXPECT_TRUE(same(ref, d));
  EXPECT_EQ(staging_stats(*staged_half).copies_to_device, staging_stats(*staged_).copies_to_device)
      << "the split group shares its parent's pool";
  EXPECT_EQ(staged_->split(-1, 0, "none"), nullptr);
}

}  // namespace
}  // namespace tessera::comm
