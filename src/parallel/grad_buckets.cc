#include "parallel/grad_buckets.h"

#include <algorithm>

#include "core/progress.h"
#include "kernels/tensor_ops.h"

namespace tessera::parallel {

std::vector<FlatRange> merge_segments(std::vector<FlatRange> segments) {
  std::sort(segments.begin(), segments.end());
  std::vector<FlatRange> out;
  for (auto [b, e] : segments) {
    TESSERA_CHECK(0 <= b && b < e, "gradient segment [", b, ", ", e, ") is empty or negative");
    TESSERA_CHECK(out.empty() || out.back().second <= b, "gradient segments [", out.back().first, ", ",
                  out.back().second, ") and [", b, ", ", e, ") overlap");
    if (!out.empty() && out.back().second == b)
      out.back().second = e;
    else
      out.push_back({b, e});
  }
  return out;
}

std::vector<BucketSpan> cut_buckets(int64_t numel, int64_t bucket_elements, int ranks,
                                    std::vector<FlatRange> own_buckets) {
  for (auto [b, e] : own_buckets)
    TESSERA_CHECK(0 <= b && b < e && e <= numel, "gradient bucket [", b, ", ", e, ") is outside the buffer of ",
                  numel, " elements");
  std::vector<FlatRange> whole;
  if (numel > 0) whole.push_back({0, numel});
  return cut_buckets(std::move(whole), bucket_elements, ranks, std::move(own_buckets));
}

std::vector<BucketSpan> cut_buckets(std::vector<FlatRange> segments, int64_t bucket_elements, int ranks,
                                    std::vector<FlatRange> own_buckets) {
  TESSERA_CHECK(bucket_elements > 0, "gradient bucket size must be positive, got ", bucket_elements);
  TESSERA_CHECK(ranks > 0, "gradient buckets need at least one rank, got ", ranks);
  segments = merge_segments(std::move(segments));
  std::sort(own_buckets.begin(), own_buckets.end());
  for (size_t i = 0; i < own_buckets.size(); ++i) {
    auto [b, e] = own_buckets[i];
    const bool inside = std::any_of(segments.begin(), segments.end(),
                                    [&](const FlatRange& s) { return s.first <= b && b < e && e <= s.second; });
    TESSERA_CHECK(inside, "gradient bucket [", b, ", ", e, ") is not inside one of the buckets' segments");
    TESSERA_CHECK(i == 0 || own_buckets[i - 1].second <= b, "gradient buckets [", own_buckets[i - 1].first, ", ",
                  own_buckets[i - 1].second, ") and [", b, ", ", e, ") overlap");
  }
  std::vector<BucketSpan> out;
  auto add = [&](int64_t b, int64_t e) { out.push_back({b, e, (e - b) / ranks}); };
  // Walk down from the end of each segment: the regular buckets above each own bucket, then the own
  // bucket, then what is below it.
  auto own = own_buckets.rbegin();
  for (auto seg = segments.rbegin(); seg != segments.rend(); ++seg) {
    int64_t end = seg->second;
    for (;;) {
      const bool has_own = own != own_buckets.rend() && own->first >= seg->first;
      const int64_t floor = has_own ? own->second : seg->first;
      for (; end > floor; end -= bucket_elements) add(std::max(floor, end - bucket_elements), end);
      if (!has_own) break;
      add(own->first, own->second);
      end = own->first;
      ++own;
    }
  }
  return out;
}

std::vector<OwnedRange> owned_ranges(const std::vector<BucketSpan>& buckets, int ranks, int rank) {
  std::vector<OwnedRange> out;
  for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
    if (it->piece > 0) out.push_back({it->begin + rank * it->piece, it->begin + (rank + 1) * it->piece, false});
    if (it->tail_begin(ranks) < it->end) out.push_back({it->tail_begin(ranks), it->end, true});
  }
  return out;
}

GradBuckets::GradBuckets(const Tensor& grads, int64_t bucket_elements, comm::ProcessGroup& group, Mode mode,
                         std::vector<FlatRange> own_buckets, std::vector<FlatRange> segments)
    : grads_(grads), group_(group), mode_(mode) {
  if (segments.empty() && grads.numel() > 0) segments.push_back({0, grads.numel()});
  segments_ = merge_segments(std::move(segments));
  TESSERA_CHECK(segments_.empty() || segments_.back().second <= grads.numel(), "gradient segment ending at ",
                segments_.back().second, " is outside the buffer of ", grads.numel(), " elements");
  spans_ = cut_buckets(segments_, bucket_elements, group.size(), std::move(own_buckets));
  for (const BucketSpan& s : spans_) buckets_.push_back({s, nullptr, nullptr, Tensor(), false, false});
  if (group.size() > 1) progress::add_hook(this, [this] { progress(); });
}

GradBuckets::~GradBuckets() { progress::remove_hook(this); }

void GradBuckets::progress() {
  // Each test of an incomplete request lets MPI advance every operation in flight, not only that one.
  for (Bucket& b : buckets_) {
    if (!b.started || b.done) continue;
    const bool piece = !b.work || b.work->test();
    const bool tail = !b.tail_work || b.tail_work->test();
    b.done = piece && tail;
  }
  for (Gather& g : gathers_)
    if (!g.done) g.done = g.work->test();
}

std::vector<OwnedRange> GradBuckets::owned_ranges() const {
  if (mode_ == Mode::AllReduce) {
    std::vector<OwnedRange> all;
    for (auto [b, e] : segments_) all.push_back({b, e, true});
    return all;
  }
  return parallel::owned_ranges(spans_, group_.size(), group_.rank());
}

int64_t GradBuckets::reductions_in_flight() const {
  return std::count_if(buckets_.begin(), buckets_.end(), [](const Bucket& b) { return b.started && !b.done; });
}

int64_t GradBuckets::gathers_in_flight() const {
  return std::count_if(gathers_.begin(), gathers_.end(), [](const Gather& g) { return !g.done; });
}

void GradBuckets::mark_final_from(int64_t first_final) {
  if (group_.size() == 1) return;
  const int ranks = group_.size();
  for (Bucket& b : buckets_) {
    if (b.started || b.span.begin < first_final) continue;
    b.started = true;
    if (mode_ == Mode::AllReduce) {
      b.work = group_.all_reduce_async(grads_.flat_range(b.span.begin, b.span.end - b.span.begin));
      continue;
    }
    // MPI's reduce-scatter is out of place: the piece arrives in its own buffer and is copied into the
    // gradient buffer by finish().
    if (b.span.piece > 0) {
      b.reduced_piece = Tensor::empty({b.span.piece}, DType::F32, grads_.device());
      b.work = group_.reduce_scatter_async(grads_.flat_range(b.span.begin, ranks * b.span.piece), b.reduced_piece);
    }
    const int64_t tail = b.span.tail_begin(ranks);
    if (tail < b.span.end) b.tail_work = group_.all_reduce_async(grads_.flat_range(tail, b.span.end - tail));
  }
  // Called once per layer by backward: also a progress point for what is already in flight.
  progress();
}

void GradBuckets::finish() {
  if (group_.size() == 1) return;
  mark_final_from(0);
  for (Bucket& b : buckets_) {
    ++counts_.reduced;
    if (b.done) ++counts_.reduced_before_wait;
    if (b.work) b.work->wait();
    if (b.tail_work) b.tail_work->wait();
    if (b.reduced_piece.defined()) {
      // A kernel's copy: the gradient buffer is on the GPU in a run there.
      kernels::copy(grads_.flat_range(b.span.begin + group_.rank() * b.span.piece, b.span.piece), b.reduced_piece);
      b.reduced_piece = Tensor();
    }
    b.work.reset();
    b.tail_work.reset();
    b.started = b.done = false;
  }
}

void GradBuckets::start_param_gather(const Tensor& values) {
  TESSERA_CHECK(mode_ == Mode::ReduceScatter, "the parameter all-gather belongs to the distributed optimizer");
  TESSERA_CHECK(values.numel() == grads_.numel(), "parameter buffer of ", values.numel(),
                " elements does not match the gradient buffer of ", grads_.numel());
  TESSERA_CHECK(gathers_.empty(), "a parameter all-gather is already in flight");
  if (group_.size() == 1) return;
  const int ranks = group_.size();
  // Tails are updated identically on every rank and need no exchange.
  for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {
    const BucketSpan& s = it->span;
    if (s.piece == 0) continue;
    Tensor whole = values.flat_range(s.begin, ranks * s.piece);
    // The own piece already sits in its chunk of `whole`: an in-place all-gather.
    gathers_.push_back({s.begin, group_.all_gather_async(whole.flat_range(group_.rank() * s.piece, s.piece), whole),
                        false});
  }
}

void GradBuckets::wait_param_gather() { wait_param_gather_below(grads_.numel()); }

void GradBuckets::wait_param_gather_below(int64_t end) {
  size_t done = 0;
  for (; done < gathers_.size() && gathers_[done].begin < end; ++done) {
    ++counts_.gathered;
    if (gathers_[done].done) ++counts_.gathered_before_wait;
    gathers_[done].work->wait();
  }
  gathers_.erase(gathers_.begin(), gathers_.begin() + static_cast<std::ptrdiff_t>(done));
}

}  // namespace tessera::parallel
