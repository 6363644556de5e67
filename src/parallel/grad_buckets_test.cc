// The bucket layout the distributed optimizer shards by: every element of the buffer is owned by
// exactly one data-parallel rank (or, in a bucket's tail, by all of them), buckets keep to their size,
// and a bucket of its own is split the same way wherever it sits in the buffer.
#include "parallel/grad_buckets.h"

#include <gtest/gtest.h>

namespace tessera::parallel {
namespace {

// Each element is one rank's piece, or a tail owned by every rank.
void expect_partition(int64_t numel, const std::vector<BucketSpan>& buckets, int ranks) {
  std::vector<int> owners(numel, 0), tails(numel, 0);
  for (int r = 0; r < ranks; ++r) {
    int64_t last_end = -1;
    for (const OwnedRange& o : owned_ranges(buckets, ranks, r)) {
      EXPECT_GT(o.begin, last_end - 1) << "ranges of rank " << r << " are not in increasing order";
      last_end = o.end;
      for (int64_t i = o.begin; i < o.end; ++i) (o.replicated ? tails : owners)[i]++;
    }
  }
  for (int64_t i = 0; i < numel; ++i) {
    ASSERT_TRUE((owners[i] == 1 && tails[i] == 0) || (owners[i] == 0 && tails[i] == ranks))
        << "element " << i << " owned as a piece by " << owners[i] << " ranks and as a tail by " << tails[i];
  }
  // The tails are fewer than `ranks` elements per bucket.
  for (const BucketSpan& b : buckets) EXPECT_LT(b.end - b.tail_begin(ranks), ranks);
}

TEST(CutBuckets, CoverTheBufferFromItsEndWithinTheBucketSize) {
  std::vector<BucketSpan> b = cut_buckets(1000, 300, 4);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].begin, 700);
  EXPECT_EQ(b[0].end, 1000);
  EXPECT_EQ(b[0].piece, 75);
  EXPECT_EQ(b[3].begin, 0);
  EXPECT_EQ(b[3].end, 100);
  for (int ranks : {1, 2, 3, 4, 7, 8}) {
    SCOPED_TRACE(ranks);
    expect_partition(1000, cut_buckets(1000, 300, ranks), ranks);
    expect_partition(1000, cut_buckets(1000, 97, ranks), ranks);
    expect_partition(5, cut_buckets(5, 300, ranks), ranks);
  }
}

TEST(CutBuckets, OwnBucketsStandAloneAndSplitAlikeWhereverTheySit) {
  // The same 130-element parameter at the start of one buffer and in the middle of another.
  for (int ranks : {1, 2, 3, 8}) {
    SCOPED_TRACE(ranks);
    std::vector<BucketSpan> first = cut_buckets(1000, 256, ranks, {{0, 130}});
    std::vector<BucketSpan> last = cut_buckets(700, 256, ranks, {{401, 531}});
    expect_partition(1000, first, ranks);
    expect_partition(700, last, ranks);
    auto find = [](const std::vector<BucketSpan>& bs, int64_t begin) {
      for (const BucketSpan& b : bs)
        if (b.begin == begin) return b;
      ADD_FAILURE() << "no bucket starts at " << begin;
      return BucketSpan{};
    };
    BucketSpan a = find(first, 0), b = find(last, 401);
    EXPECT_EQ(a.end - a.begin, 130);
    EXPECT_EQ(b.end - b.begin, 130);
    EXPECT_EQ(a.piece, b.piece);
    for (const BucketSpan& s : last) EXPECT_LE(s.end - s.begin, s.begin == 401 ? 130 : 256);
  }
}

TEST(CutBuckets, BadOwnBucketsAreRejected) {
  EXPECT_THROW(cut_buckets(100, 10, 2, {{90, 120}}), Error);
  EXPECT_THROW(cut_buckets(100, 10, 2, {{10, 30}, {20, 40}}), Error);
  EXPECT_THROW(cut_buckets(100, 0, 2), Error);
}

TEST(GradBuckets, ReduceScatterOverOneRankOwnsEverything) {
  auto group = comm::make_single_process_group("data");
  Tensor grads = Tensor::zeros({50});
  GradBuckets buckets(grads, 16, *group, GradBuckets::Mode::ReduceScatter);
  int64_t covered = 0;
  for (const OwnedRange& r : buckets.owned_ranges()) covered += r.end - r.begin;
  EXPECT_EQ(covered, 50);
  buckets.finish();
  Tensor values = Tensor::zeros({50});
  buckets.start_param_gather(values);
  buckets.wait_param_gather();
  EXPECT_FALSE(buckets.param_gather_pending());
}

}  // namespace
}  // namespace tessera::parallel
