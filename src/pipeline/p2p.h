// Point-to-point traffic between pipeline stages: activations forward, their gradients backward, over
// the pipeline group (the ranks of one tensor and data position, one per stage). Everything is
// nonblocking: receives are posted ahead of need, sends return at once and their buffers are kept
// until MPI is done with them.
//
// With tensor parallelism (and no sequence parallelism) every tensor rank holds the same activation;
// as in the PTD-P paper each sends only its 1/tp part and the receiving stage all-gathers it over its
// tensor group (the scatter/gather optimisation). Under sequence parallelism the activation is already
// split by sequence, so each rank sends its own shard. A chunk whose neighbour is on the same rank (the
// turn of ZB-V's V) hands its tensor over without a message.
#pragma once

#include <map>
#include <vector>
#include <tuple>

#include "comm/process_group.h"
#include "pipeline/schedules.h"

namespace tessera::pipeline {

class PipelineP2P {
 public:
  // `activation` is the shape of one micro-batch's activation on this rank. scatter_gather_group: the
  // tensor group when the activation is replicated over it (null or a group of one otherwise).
  PipelineP2P(comm::ProcessGroup& pipeline, const ScheduleShape& shape, Shape activation,
              comm::ProcessGroup* scatter_gather_group);
  // With token slices (TeraPipe): the activation shape of each slice, shape.slices of them.
  PipelineP2P(comm::ProcessGroup& pipeline, const ScheduleShape& shape, std::vector<Shape> slice_activations,
              comm::ProcessGroup* scatter_gather_group);

  // Posts the receive of a RecvForward or RecvBackward op (once; later calls do nothing).
  void post_recv(const Op& op);
  // The received activation or gradient of a Recv op (posting the receive if needed).
  Tensor wait_recv(const Op& op);
  // Starts sending the output (SendForward) or input gradient (SendBackward) of `op`.
  void send(const Op& op, const Tensor& t);
  // Releases the buffers of sends that have completed; with `all`, waits for every send first.
  void reap_sends(bool all = false);
  int pending_sends() const { return static_cast<int>(sends_.size()); }
  // Seconds spent blocked in wait_recv and in reap_sends(true) since construction.
  double wait_seconds() const { return wait_seconds_; }

 private:
  // The message tag of a transfer, named by the receiving chunk and the slice: unique within an iteration.
  int tag(bool forward, const Op& op, int receiving_chunk) const;
  const Shape& activation(const Op& op) const;
  // Whether the slice's activation is sent in 1/tp parts and all-gathered (it splits evenly).
  bool split(const Op& op) const;

  comm::ProcessGroup& pipeline_;
  ScheduleShape shape_;
  std::vector<Shape> activations_;        // per token slice (one when unsliced)
  comm::ProcessGroup* gather_ = nullptr;  // scatter/gather over this tensor group
  struct Pending {
    Tensor buffer;
    comm::WorkHandle work;
  };
  using Key = std::tuple<OpKind, int, int, int>;  // (kind, micro-batch, chunk, slice) of the op on this rank
  std::map<Key, Pending> recvs_, sends_;
  // Keyed by the receiving op: what a chunk sent to this rank's own other chunk (ZB-V's turn at the last
  // rank), which no message carries.
  std::map<Key, Tensor> local_;
  double wait_seconds_ = 0;
};

}  // namespace tessera::pipeline
