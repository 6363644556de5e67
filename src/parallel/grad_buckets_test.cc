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

// Over segments: each element of a segment is owned as in expect_partition, nothing outside them is,
// and no bucket crosses a segment's edge.
void expect_segment_partition(int64_t numel, const std::vector<FlatRange>& segments,
                              const std::vector<BucketSpan>& buckets, int ranks) {
  std::vector<int> segment_of(numel, -1);
  for (size_t i = 0; i < segments.size(); ++i)
    for (int64_t e = segments[i].first; e < segments[i].second; ++e) segment_of[e] = static_cast<int>(i);
  for (const BucketSpan& b : buckets) {
    ASSERT_LT(b.begin, b.end);
    EXPECT_NE(segment_of[b.begin], -1) << "bucket [" << b.begin << ", " << b.end << ") starts outside the segments";
    for (int64_t e = b.begin; e < b.end; ++e)
      ASSERT_EQ(segment_of[e], segment_of[b.begin]) << "bucket [" << b.begin << ", " << b.end << ") crosses a segment edge";
  }
  std::vector<int> owners(numel, 0), tails(numel, 0);
  for (int r = 0; r < ranks; ++r)
    for (const OwnedRange& o : owned_ranges(buckets, ranks, r))
      for (int64_t i = o.begin; i < o.end; ++i) (o.replicated ? tails : owners)[i]++;
  for (int64_t i = 0; i < numel; ++i) {
    if (segment_of[i] < 0) {
      ASSERT_EQ(owners[i] + tails[i], 0) << "element " << i << " is outside the segments but owned";
    } else {
      ASSERT_TRUE((owners[i] == 1 && tails[i] == 0) || (owners[i] == 0 && tails[i] == ranks)) << "element " << i;
    }
  }
}

TEST(CutBuckets, SegmentsAreCutEachFromItsEnd) {
  // The dense and expert parts of a buffer, interleaved as layers would hold them.
  const std::vector<FlatRange> dense{{0, 100}, {160, 300}, {420, 500}}, expert{{100, 160}, {300, 420}};
  for (int ranks : {1, 2, 3, 8}) {
    SCOPED_TRACE(ranks);
    std::vector<BucketSpan> d = cut_buckets(dense, 64, ranks, {{0, 50}}), x = cut_buckets(expert, 64, ranks);
    expect_segment_partition(500, dense, d, ranks);
    expect_segment_partition(500, expert, x, ranks);
    // Last segment first, each from its end: [436, 500) [420, 436) | [236, 300) [172, 236) [160, 172) | ...
    ASSERT_GE(d.size(), 3u);
    EXPECT_EQ(d[0].begin, 436);
    EXPECT_EQ(d[0].end, 500);
    EXPECT_EQ(d[1].begin, 420);
    EXPECT_EQ(d[2].begin, 236);
    EXPECT_EQ(d[2].end, 300);
    EXPECT_EQ(d.back().begin, 0);  // the own bucket [0, 50)
    EXPECT_EQ(d.back().end, 50);
    for (size_t i = 1; i < d.size(); ++i) EXPECT_LT(d[i].begin, d[i - 1].begin);
  }
  // The whole buffer as adjacent segments cuts exactly as the whole buffer.
  std::vector<BucketSpan> whole = cut_buckets(1000, 97, 4, {{130, 260}}),
                          pieces = cut_buckets(std::vector<FlatRange>{{600, 1000}, {0, 250}, {250, 600}}, 97, 4,
                                               {{130, 260}});
  ASSERT_EQ(whole.size(), pieces.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_EQ(whole[i].begin, pieces[i].begin);
    EXPECT_EQ(whole[i].end, pieces[i].end);
    EXPECT_EQ(whole[i].piece, pieces[i].piece);
  }
}

TEST(CutBuckets, BadSegmentsAreRejected) {
  EXPECT_THROW(cut_buckets(std::vector<FlatRange>{{0, 50}, {40, 60}}, 10, 2), Error);          // overlap
  EXPECT_THROW(cut_buckets(std::vector<FlatRange>{{10, 10}}, 10, 2), Error);                   // empty
  EXPECT_THROW(cut_buckets(std::vector<FlatRange>{{0, 50}, {60, 90}}, 10, 2, {{40, 70}}), Error);  // own across a gap
  EXPECT_THROW(cut_buckets(std::vector<FlatRange>{{0, 50}}, 10, 2, {{60, 70}}), Error);        // own outside
  auto group = comm::make_single_process_group("data");
  Tensor grads = Tensor::zeros({50});
  EXPECT_THROW(GradBuckets(grads, 16, *group, GradBuckets::Mode::AllReduce, {}, {{40, 60}}), Error);
}

TEST(GradBuckets, SegmentsAreWhatItOwnsUnderAllReduce) {
  auto group = comm::make_single_process_group("expert-data");
  Tensor grads = Tensor::zeros({50});
  GradBuckets buckets(grads, 16, *group, GradBuckets::Mode::AllReduce, {}, {{30, 40}, {5, 10}, {10, 20}});
  EXPECT_EQ(buckets.segments(), (std::vector<FlatRange>{{5, 20}, {30, 40}}));
  std::vector<OwnedRange> owned = buckets.owned_ranges();
  ASSERT_EQ(owned.size(), 2u);
  EXPECT_EQ(owned[0].begin, 5);
  EXPECT_EQ(owned[0].end, 20);
  EXPECT_EQ(owned[1].begin, 30);
  EXPECT_TRUE(owned[1].replicated);
  EXPECT_EQ(&buckets.group(), group.get());
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
