// Data-parallel gradient reduction over the flat gradient buffer, in buckets that start their
// reduction as soon as their gradients are final (Megatron's DDP with --overlap-grad-reduce).
// Backward produces gradients from the end of the flat buffer towards its start (output layer, last
// transformer layer, ..., embedding), so buckets are cut from the end and a bucket is ready once the
// backward has finished everything at or above its first element.
//
// Two modes. AllReduce: every rank ends with the whole summed buffer. ReduceScatter (the distributed
// optimizer): each bucket is split over the data-parallel ranks, and each rank ends with the sum only
// on the part it owns; after the optimizer has updated those parts, the parameters are all-gathered
// bucket by bucket over the same layout (Megatron shards its buffer by bucket in the same way).
//
// Per group: a GradBuckets may cover only some segments of the flat buffer (the parameters one
// data-parallel group reduces, e.g. the expert weights over the expert-data-parallel group), each with
// its own ProcessGroup; the trainer makes one per group. A bucket never spans two segments, so that
// every collective works in place on one contiguous range (Megatron keeps separate buffers instead).
//
// Progress: MPI (Open MPI at least) advances a nonblocking collective only inside MPI calls, so while
// reductions or gathers are in flight the buckets test them at every progress point (core/progress.h:
// each GEMM and attention kernel, and every mark_final_from). Started during backward, they then run
// during backward instead of at finish().
#pragma once

#include <utility>
#include <vector>

#include "comm/process_group.h"

namespace tessera::parallel {

// One bucket [begin, end) of the flat buffer, split over `ranks` data-parallel ranks: rank d owns the
// piece [begin + d·piece, begin + (d+1)·piece), piece = (end - begin) / ranks rounded down, and the
// tail [begin + ranks·piece, end) of fewer than `ranks` elements is all-reduced and owned by every rank
// (instead of padding the bucket to a multiple of the group size).
struct BucketSpan {
  int64_t begin = 0, end = 0, piece = 0;

  int64_t tail_begin(int ranks) const { return begin + ranks * piece; }
};

// A flat range a rank owns: its piece of a bucket, or (replicated) a bucket's tail that every rank owns.
struct OwnedRange {
  int64_t begin = 0, end = 0;
  bool replicated = false;
};

using FlatRange = std::pair<int64_t, int64_t>;  // [begin, end) of the flat buffer

// Cuts [0, numel) into buckets of at most bucket_elements, from the end. Each range of `own_buckets`
// (disjoint [begin, end) pairs) becomes a bucket of its own whatever its size: a parameter held by two
// pipeline stages (the tied word embedding) is then split over the data-parallel ranks the same way on
// both, so the sum of its reduced pieces over the embedding group is the full gradient. Returned from
// the end of the buffer to its start.
std::vector<BucketSpan> cut_buckets(int64_t numel, int64_t bucket_elements, int ranks,
                                    std::vector<FlatRange> own_buckets = {});
// The same over some segments of the buffer only (disjoint; touching ones are merged first, so the
// whole buffer as one or as several adjacent segments cuts alike): each segment is cut from its end as
// above, the last segment first. Every own bucket must lie inside one segment.
std::vector<BucketSpan> cut_buckets(std::vector<FlatRange> segments, int64_t bucket_elements, int ranks,
                                    std::vector<FlatRange> own_buckets = {});
// Sorted, checked to be disjoint and non-empty, touching ranges merged.
std::vector<FlatRange> merge_segments(std::vector<FlatRange> segments);

// The ranges of [0, numel) that `rank` owns under `buckets`, in increasing flat order.
std::vector<OwnedRange> owned_ranges(const std::vector<BucketSpan>& buckets, int ranks, int rank);

class GradBuckets {
 public:
  enum class Mode { AllReduce, ReduceScatter };

  // grads: the flat fp32 gradient buffer; bucket_elements: target bucket size (the last one may be
  // smaller); group: the data-parallel group (a group of one makes every call a no-op); own_buckets:
  // see cut_buckets; segments: the parts of the buffer this group reduces (empty: all of it).
  GradBuckets(const Tensor& grads, int64_t bucket_elements, comm::ProcessGroup& group, Mode mode = Mode::AllReduce,
              std::vector<FlatRange> own_buckets = {}, std::vector<FlatRange> segments = {});
  ~GradBuckets();
  GradBuckets(const GradBuckets&) = delete;  // registered by address as a progress hook
  GradBuckets& operator=(const GradBuckets&) = delete;

  // Everything at flat offset >= first_final is final: start the reduction of every bucket that now is
  // (the offset is of the whole buffer, whatever segments these buckets cover).
  void mark_final_from(int64_t first_final);
  // Starts what is left and waits for every bucket. After it, the buffer holds the sum over the group:
  // on all its segments (AllReduce), or on this rank's owned ranges (ReduceScatter; elsewhere it keeps
  // this rank's own contribution).
  void finish();

  // ReduceScatter mode: all-gathers, in place, every rank's owned pieces of `values` (a buffer with the
  // gradients' layout) so that every rank holds the whole buffer; the buckets nearest the buffer's start
  // (the first layers, needed first by the next forward) are started first. wait_param_gather() waits
  // for all of them; wait_param_gather_below(end) only for the buckets holding elements below `end`
  // (Megatron's per-bucket wait before the first use of a bucket's parameters in the next forward).
  void start_param_gather(const Tensor& values);
  void wait_param_gather();
  void wait_param_gather_below(int64_t end);
  bool param_gather_pending() const { return !gathers_.empty(); }

  // Tests every reduction and gather in flight, which lets MPI advance them (the progress hook).
  void progress();
  // Since construction: buckets reduced, and how many of them had completed before finish() waited for
  // them; the same for the parameter all-gathers and their waits. They show that progress is driven.
  struct Counts {
    int64_t reduced = 0, reduced_before_wait = 0;
    int64_t gathered = 0, gathered_before_wait = 0;
  };
  const Counts& counts() const { return counts_; }
  // Buckets started and not yet seen complete by progress(), and the same for the all-gathers.
  int64_t reductions_in_flight() const;
  int64_t gathers_in_flight() const;

  Mode mode() const { return mode_; }
  comm::ProcessGroup& group() const { return group_; }
  // The merged segments these buckets cover, in increasing order.
  const std::vector<FlatRange>& segments() const { return segments_; }
  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  const std::vector<BucketSpan>& spans() const { return spans_; }
  // The ranges this rank owns (ReduceScatter; every segment, replicated, under AllReduce).
  std::vector<OwnedRange> owned_ranges() const;

 private:
  struct Bucket {
    BucketSpan span;
    comm::WorkHandle work, tail_work;
    Tensor reduced_piece;  // ReduceScatter: where this rank's summed piece arrives
    bool started = false;
    bool done = false;  // its reduction has completed (seen by progress())
  };
  struct Gather {
    int64_t begin;  // the bucket's first element
    comm::WorkHandle work;
    bool done;
  };
  Tensor grads_;
  comm::ProcessGroup& group_;
  Mode mode_;
  std::vector<FlatRange> segments_;
  std::vector<BucketSpan> spans_;
  std::vector<Bucket> buckets_;  // from the end of the buffer to its start
  // In flight: each bucket's all-gather, in increasing flat order.
  std::vector<Gather> gathers_;
  Counts counts_;
};

}  // namespace tessera::parallel
