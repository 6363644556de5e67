// Data-parallel gradient reduction over the flat gradient buffer, in buckets that start their
// all-reduce as soon as their gradients are final (Megatron's DDP with --overlap-grad-reduce).
// Backward produces gradients from the end of the flat buffer towards its start (output layer, last
// transformer layer, ..., embedding), so buckets are cut from the end and a bucket is ready once the
// backward has finished everything at or above its first element.
#pragma once

#include <vector>

#include "comm/process_group.h"

namespace tessera::parallel {

class GradBuckets {
 public:
  // grads: the flat fp32 gradient buffer; bucket_elements: target bucket size (the last one may be
  // smaller); group: the data-parallel group (a group of one makes every call a no-op).
  GradBuckets(const Tensor& grads, int64_t bucket_elements, comm::ProcessGroup& group);

  // Everything at flat offset >= first_final is final: start the all-reduce of every bucket that now is.
  void mark_final_from(int64_t first_final);
  // Starts what is left and waits for every bucket. After it, the buffer holds the sum over the group.
  void finish();

  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Bucket {
    int64_t begin, end;
    comm::WorkHandle work;
    bool started = false;
  };
  Tensor grads_;
  comm::ProcessGroup& group_;
  std::vector<Bucket> buckets_;  // from the end of the buffer to its start
};

}  // namespace tessera::parallel
