#include "parallel/grad_buckets.h"

#include <algorithm>

namespace tessera::parallel {

GradBuckets::GradBuckets(const Tensor& grads, int64_t bucket_elements, comm::ProcessGroup& group)
    : grads_(grads), group_(group) {
  TESSERA_CHECK(bucket_elements > 0, "gradient bucket size must be positive, got ", bucket_elements);
  for (int64_t end = grads.numel(); end > 0; end -= bucket_elements)
    buckets_.push_back({std::max<int64_t>(0, end - bucket_elements), end, nullptr});
}

void GradBuckets::mark_final_from(int64_t first_final) {
  if (group_.size() == 1) return;
  for (Bucket& b : buckets_) {
    if (b.started || b.begin < first_final) continue;
    b.work = group_.all_reduce_async(grads_.flat_range(b.begin, b.end - b.begin));
    b.started = true;
  }
}

void GradBuckets::finish() {
  if (group_.size() == 1) return;
  mark_final_from(0);
  for (Bucket& b : buckets_) {
    b.work->wait();
    b.work.reset();
    b.started = false;
  }
}

}  // namespace tessera::parallel
