// Progress of the data-parallel buckets' collectives: started and then only polled through
// core/progress.h (as kernels do during backward and forward), every reduction and all-gather
// completes before the final wait, and the results are the exact sums. Without driven progress Open
// MPI would leave them waiting for that final wait, and the counters would stay at zero.
#include "parallel/grad_buckets.h"

#include <gtest/gtest.h>

#include <thread>

#include "comm/mpi_process_group.h"
#include "comm/mpi_test_main.h"
#include "core/progress.h"

namespace tessera::parallel {
namespace {

// Large enough for MPI's rendezvous protocol (which needs both sides to progress), in 5 buckets.
constexpr int64_t kElements = 5 * (1 << 18) + 13;
constexpr int64_t kBucket = 1 << 18;
// Generous: ranks share the cores; a missing progress mechanism never completes at all.
constexpr int64_t kMaxPolls = 20'000'000;

// Small integers, so that fp32 sums are exact in any order.
float value(int rank, int64_t i) { return static_cast<float>((rank + 1) * (i % 11) - rank); }

template <class Done>
int64_t poll_until(Done done) {
  int64_t polls = 0;
  for (; polls < kMaxPolls && !done(); ++polls) {
    progress::poll();
    if (polls % 64 == 63) std::this_thread::yield();  // leave the core to peers on oversubscribed runs
  }
  return polls;
}

class GradBucketsProgress : public ::testing::TestWithParam<GradBuckets::Mode> {};

TEST_P(GradBucketsProgress, PolledCollectivesCompleteBeforeTheWait) {
  auto world = comm::make_mpi_world_group();
  const int ranks = world->size(), rank = world->rank();
  if (ranks < 2) GTEST_SKIP() << "needs at least 2 ranks, has " << ranks;
  Tensor grads = Tensor::empty({kElements});
  for (int64_t i = 0; i < kElements; ++i) grads.f32()[i] = value(rank, i);
  GradBuckets buckets(grads, kBucket, *world, GetParam());

  // As backward does: buckets become final from the end, then nothing but progress points.
  buckets.mark_final_from(kElements - kBucket);
  buckets.mark_final_from(0);
  poll_until([&] { return buckets.reductions_in_flight() == 0; });
  EXPECT_EQ(buckets.reductions_in_flight(), 0) << "reductions still in flight after " << kMaxPolls << " polls";
  buckets.finish();
  EXPECT_EQ(buckets.counts().reduced, buckets.num_buckets());
  EXPECT_EQ(buckets.counts().reduced_before_wait, buckets.num_buckets());

  auto expected_sum = [&](int64_t i) {
    float s = 0;
    for (int r = 0; r < ranks; ++r) s += value(r, i);
    return s;
  };
  for (const OwnedRange& o : buckets.owned_ranges())
    for (int64_t i = o.begin; i < o.end; ++i) ASSERT_EQ(grads.f32()[i], expected_sum(i)) << "element " << i;
  if (GetParam() == GradBuckets::Mode::AllReduce) return;

  // The parameter all-gather, polled as the next forward's kernels would.
  Tensor values = Tensor::zeros({kElements});
  for (const OwnedRange& o : buckets.owned_ranges())
    for (int64_t i = o.begin; i < o.end; ++i) values.f32()[i] = expected_sum(i) + 1.0f;
  buckets.start_param_gather(values);
  const int64_t gathers = buckets.gathers_in_flight();
  EXPECT_GT(gathers, 0);
  poll_until([&] { return buckets.gathers_in_flight() == 0; });
  EXPECT_EQ(buckets.gathers_in_flight(), 0) << "all-gathers still in flight after " << kMaxPolls << " polls";
  buckets.wait_param_gather();
  EXPECT_EQ(buckets.counts().gathered, gathers);
  EXPECT_EQ(buckets.counts().gathered_before_wait, gathers);
  for (int64_t i = 0; i < kElements; ++i) ASSERT_EQ(values.f32()[i], expected_sum(i) + 1.0f) << "element " << i;
}

// The hook leaves with its buckets: polling after they are gone touches nothing.
TEST(GradBucketsProgressHook, IsRemovedWithTheBuckets) {
  auto world = comm::make_mpi_world_group();
  if (world->size() < 2) GTEST_SKIP() << "needs at least 2 ranks, has " << world->size();
  {
    Tensor grads = Tensor::zeros({100});
    GradBuckets buckets(grads, 30, *world);
    buckets.mark_final_from(0);
    buckets.finish();
  }
  progress::poll();
  SUCCEED();
}

INSTANTIATE_TEST_SUITE_P(Modes, GradBucketsProgress,
                         ::testing::Values(GradBuckets::Mode::AllReduce, GradBuckets::Mode::ReduceScatter),
                         [](const auto& info) {
                           return info.param == GradBuckets::Mode::AllReduce ? "AllReduce" : "ReduceScatter";
                         });

}  // namespace
}  // namespace tessera::parallel
