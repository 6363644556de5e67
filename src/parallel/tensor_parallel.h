// Megatron's tensor-parallel communication, as explicit forward/backward pairs (Shoeybi et al. 2019,
// Korthikanti et al. 2022). Activations are [tokens, hidden] with tokens ordered (s, b), so a
// sequence shard of [seq/tp, batch, hidden] is a contiguous block of rows.
//   f  (copy to the tensor-parallel region):        forward identity,        backward all-reduce
//   g  (reduce from the tensor-parallel region):    forward all-reduce,      backward identity
//   gather from the sequence-parallel region:       forward all-gather,      backward reduce-scatter
//   reduce-scatter to the sequence-parallel region: forward reduce-scatter,  backward all-gather
#pragma once

#include "comm/process_group.h"

namespace tessera::parallel {

struct ExpertParallelContext;  // parallel/expert_dispatch.h

// The group a model's layers are split over and whether activations outside the column/row-parallel
// pairs are sequence-sharded (--sequence-parallel); and the groups its experts are split over (null:
// every expert whole on every rank).
struct TensorParallelContext {
  comm::ProcessGroup* group = nullptr;
  bool sequence_parallel = false;
  const ExpertParallelContext* experts = nullptr;

  int rank() const { return group->rank(); }
  int size() const { return group->size(); }
  // A context of one rank (no tensor parallelism), valid for the life of the program.
  static const TensorParallelContext& single_process();
};

// [rows/tp, cols] on each rank -> [rows, cols] on every rank (rank order).
Tensor gather_rows(const Tensor& local, comm::ProcessGroup& group);
// [rows, cols] partial sums on each rank -> this rank's [rows/tp, cols] block of the sum.
Tensor reduce_scatter_rows(const Tensor& full, comm::ProcessGroup& group);
// In-place sum over the group (a no-op for one rank).
void all_reduce_sum(const Tensor& t, comm::ProcessGroup& group);

// The input of a column-parallel layer: the full activation, gathered from sequence shards when
// sequence parallel (its backward is reduce_to_input).
Tensor gather_to_tensor_parallel(const Tensor& x, const TensorParallelContext& tp);
// The conjugate: the input gradient summed over the tensor group, scattered back to sequence shards
// when sequence parallel.
Tensor reduce_to_input(const Tensor& dx_partial, const TensorParallelContext& tp);

}  // namespace tessera::parallel
