// ProcessGroup: the collectives a parallel layout needs, over one group of ranks. The MPI
// implementation runs on CPUs (mpirun, or srun under Slurm); an NCCL implementation fits the same
// interface later (tensors carry their device; asynchronous work is waited for through a handle).
// Callers never see MPI types.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tessera::comm {

enum class ReduceOp { Sum, Max };

// An operation in flight. wait() blocks until it completes (and rethrows its failure); test() returns
// whether it has completed, without blocking (and then rethrows its failure like wait()).
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
};
using WorkHandle = std::unique_ptr<Work>;

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The global (world) ranks of this group's members, in group-rank order.
  virtual const std::vector<int>& world_ranks() const = 0;
  // For messages: "tensor", "data", "pipeline", ... (set by whoever creates the group).
  virtual const std::string& name() const = 0;

  // All tensors are contiguous; fp32, int32 and int64 are supported (reductions on all three).
  // In place: every rank ends with the reduction of all ranks' t.
  virtual WorkHandle all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  // out (size() * in.numel() elements) = concatenation of every rank's `in`, in group-rank order.
  virtual WorkHandle all_gather_async(const Tensor& in, const Tensor& out) = 0;
  // in has size() * out.numel() elements; out = reduction over ranks of chunk rank() of `in`.
  virtual WorkHandle reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::Sum) = 0;
  virtual WorkHandle broadcast_async(const Tensor& t, int root) = 0;
  // Equal chunks: chunk j of `in` goes to rank j; chunk i of `out` comes from rank i.
  virtual WorkHandle all_to_all_async(const Tensor& in, const Tensor& out) = 0;
  // Variable chunks, counted in elements, laid out back to back in rank order.
  virtual WorkHandle all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& send_counts,
                                        const Tensor& out, const std::vector<int64_t>& recv_counts) = 0;
  virtual WorkHandle send_async(const Tensor& t, int dst, int tag) = 0;
  virtual WorkHandle recv_async(const Tensor& t, int src, int tag) = 0;
  virtual void barrier() = 0;

  // Collective over this group, as MPI_Comm_split: members passing the same color form a new group,
  // ordered by key (then by rank); a negative color returns null.
  virtual std::unique_ptr<ProcessGroup> split(int color, int key, const std::string& name) = 0;

  // Blocking forms.
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) { all_reduce_async(t, op)->wait(); }
  void all_gather(const Tensor& in, const Tensor& out) { all_gather_async(in, out)->wait(); }
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op = ReduceOp::Sum) {
    reduce_scatter_async(in, out, op)->wait();
  }
  void broadcast(const Tensor& t, int root) { broadcast_async(t, root)->wait(); }
  void all_to_all(const Tensor& in, const Tensor& out) { all_to_all_async(in, out)->wait(); }
  void send(const Tensor& t, int dst, int tag) { send_async(t, dst, tag)->wait(); }
  void recv(const Tensor& t, int src, int tag) { recv_async(t, src, tag)->wait(); }
};

// A group of one rank: every collective is a copy (or nothing). Used by single-process runs and tests.
std::unique_ptr<ProcessGroup> make_single_process_group(const std::string& name);

}  // namespace tessera::comm
