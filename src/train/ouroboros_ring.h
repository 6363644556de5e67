// Ouroboros' ring transport on P ranks (train/ouroboros_driver.h): the point to point between modules on
// different ranks, activations forward around the ring rank 0 -> 1 -> ... -> P-1 -> 0 and error gradients
// back, each message tagged by (kind, mini-batch, micro-batch). Module k is on rank
// pipeline::ouroboros_rank_of_module (k, and module K-1 on rank 0 beside module 0).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "comm/process_group.h"
#include "pipeline/ouroboros_schedule.h"

namespace tessera::train {

class OuroborosRing {
 public:
  enum class Kind {
    Activation = 0,     // a training forward's output, to the module above
    ErrorGradient = 1,  // a backward's input gradient, to the module below
    Evaluation = 2,     // an evaluation forward's output (between steps)
  };

  // group: the P = K - 1 ranks in ring order (the pipeline group). Not owned.
  OuroborosRing(comm::ProcessGroup& group, const pipeline::OuroborosShape& shape);

  comm::ProcessGroup& group() const { return *group_; }
  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }
  // The shape of one micro-batch's activation between modules (what receive makes).
  void set_activation_shape(const Shape& shape) { activation_ = shape; }

  // Sends `t` to the rank of module `to_module` without waiting; `t` is kept until finish_sends.
  void send(const Tensor& t, int to_module, Kind kind, int64_t batch, int micro);
  // Receives the message of (kind, batch, micro) from the rank of module `from_module`.
  Tensor receive(int from_module, Kind kind, int64_t batch, int micro);
  // Waits for every send in flight (so that no message outlives a step or an evaluation).
  void finish_sends();

 private:
  int tag(Kind kind, int64_t batch, int micro) const;

  comm::ProcessGroup* group_;
  pipeline::OuroborosShape shape_;
  Shape activation_;
  std::vector<std::pair<Tensor, comm::WorkHandle>> sends_;  // in flight until finish_sends
};

}  // namespace tessera::train
