#include "train/ouroboros_ring.h"

#include "core/check.h"

namespace tessera::train {

OuroborosRing::OuroborosRing(comm::ProcessGroup& group, const pipeline::OuroborosShape& shape)
    : group_(&group), shape_(shape) {}

// Unique among the messages that can be in flight between two ranks at once: forward or backward, the
// mini-batch modulo 4 (a rank is never more than one iteration ahead of its neighbour), the micro-batch;
// evaluation's forward (between steps) has tags of its own.
int OuroborosRing::tag(Kind kind, int64_t batch, int micro) const {
  TESSERA_CHECK(micro < 2048, "Ouroboros on ", size(), " ranks: at most 2048 micro-batches per iteration, got ",
                micro + 1);
  if (kind == Kind::Evaluation) return 8 * 2048 + micro;
  return static_cast<int>(((batch & 3) * 2 + static_cast<int>(kind)) * 2048 + micro);
}

void OuroborosRing::send(const Tensor& t, int to_module, Kind kind, int64_t batch, int micro) {
  const int dst = pipeline::ouroboros_rank_of_module(shape_, to_module);
  sends_.emplace_back(t, group_->send_async(t, dst, tag(kind, batch, micro)));
}

Tensor OuroborosRing::receive(int from_module, Kind kind, int64_t batch, int micro) {
  Tensor t = Tensor::empty(activation_);
  group_->recv(t, pipeline::ouroboros_rank_of_module(shape_, from_module), tag(kind, batch, micro));
  return t;
}

void OuroborosRing::finish_sends() {
  for (auto& [buffer, work] : sends_) work->wait();
  sends_.clear();
}

}  // namespace tessera::train
