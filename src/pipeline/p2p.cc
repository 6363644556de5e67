#include "pipeline/p2p.h"

#include "core/timer.h"

namespace tessera::pipeline {

PipelineP2P::PipelineP2P(comm::ProcessGroup& pipeline, const ScheduleShape& shape, Shape activation,
                         comm::ProcessGroup* scatter_gather_group)
    : PipelineP2P(pipeline, shape, std::vector<Shape>{std::move(activation)}, scatter_gather_group) {}

PipelineP2P::PipelineP2P(comm::ProcessGroup& pipeline, const ScheduleShape& shape, std::vector<Shape> slice_activations,
                         comm::ProcessGroup* scatter_gather_group)
    : pipeline_(pipeline), shape_(shape), activations_(std::move(slice_activations)) {
  TESSERA_CHECK(pipeline.size() == shape.stages, "pipeline group of ", pipeline.size(), " ranks for ",
                shape.stages, " stages");
  TESSERA_CHECK(static_cast<int>(activations_.size()) == shape.slices, "pipeline p2p: ", activations_.size(),
                " activation shapes for ", shape.slices, " token slices");
  if (scatter_gather_group && scatter_gather_group->size() > 1) gather_ = scatter_gather_group;
}

const Shape& PipelineP2P::activation(const Op& op) const {
  TESSERA_CHECK(op.slice >= 0 && op.slice < static_cast<int>(activations_.size()), "pipeline op ", to_string(op),
                " names token slice ", op.slice, " of ", activations_.size());
  return activations_[static_cast<size_t>(op.slice)];
}

bool PipelineP2P::split(const Op& op) const {
  if (gather_ == nullptr) return false;
  int64_t numel = 1;
  for (int64_t d : activation(op)) numel *= d;
  return numel % gather_->size() == 0;
}

int PipelineP2P::tag(bool forward, const Op& op, int receiving_chunk) const {
  return (forward ? 0 : 1) +
         2 * (receiving_chunk + shape_.chunks * (op.slice + shape_.slices * op.micro_batch));
}

void PipelineP2P::post_recv(const Op& op) {
  TESSERA_CHECK(op.kind == OpKind::RecvForward || op.kind == OpKind::RecvBackward, "post_recv of ", to_string(op));
  Key key{op.kind, op.micro_batch, op.chunk, op.slice};
  if (recvs_.count(key)) return;
  const bool forward = op.kind == OpKind::RecvForward;
  ChunkId me{pipeline_.rank(), op.chunk};
  ChunkId from = forward ? previous_chunk(shape_, me) : next_chunk(shape_, me);
  if (from.stage == me.stage) return;  // the V's turn: send() leaves it in local_
  Tensor full = Tensor::empty(activation(op));
  Tensor buffer = split(op) ? Tensor::empty({full.numel() / gather_->size()}) : full;
  comm::WorkHandle work = pipeline_.recv_async(buffer, from.stage, tag(forward, op, op.chunk));
  recvs_.emplace(key, Pending{buffer, std::move(work)});
}

Tensor PipelineP2P::wait_recv(const Op& op) {
  if (auto local = local_.find({op.kind, op.micro_batch, op.chunk, op.slice}); local != local_.end()) {
    Tensor t = std::move(local->second);
    local_.erase(local);
    return t;
  }
  post_recv(op);
  auto it = recvs_.find({op.kind, op.micro_batch, op.chunk, op.slice});
  Timer t;
  it->second.work->wait();
  Tensor received = it->second.buffer;
  recvs_.erase(it);
  if (split(op)) {  // each tensor rank received its part: all-gather the whole activation
    Tensor full = Tensor::empty(activation(op));
    gather_->all_gather(received, full.view({full.numel()}));
    received = full;
  }
  wait_seconds_ += t.seconds();
  return received;
}

void PipelineP2P::send(const Op& op, const Tensor& t) {
  TESSERA_CHECK(op.kind == OpKind::SendForward || op.kind == OpKind::SendBackward, "send of ", to_string(op));
  TESSERA_CHECK(t.shape() == activation(op), "pipeline send of ", to_string(op), ": tensor ", shape_str(t.shape()),
                ", expected ", shape_str(activation(op)));
  const bool forward = op.kind == OpKind::SendForward;
  ChunkId me{pipeline_.rank(), op.chunk};
  ChunkId to = forward ? next_chunk(shape_, me) : previous_chunk(shape_, me);
  if (to.stage == me.stage) {  // the V's turn (ZB-V): this rank's other chunk takes it as it is
    const bool fresh = local_.emplace(Key{forward ? OpKind::RecvForward : OpKind::RecvBackward, op.micro_batch,
                                          to.chunk, op.slice}, t).second;
    TESSERA_CHECK(fresh, "pipeline send of ", to_string(op), " twice");
    return;
  }
  Tensor part = t;
  if (split(op)) {
    const int64_t n = t.numel() / gather_->size();
    part = t.flat_range(gather_->rank() * n, n);
  }
  comm::WorkHandle work = pipeline_.send_async(part, to.stage, tag(forward, op, to.chunk));
  sends_[{op.kind, op.micro_batch, op.chunk, op.slice}] = Pending{part, std::move(work)};
}

void PipelineP2P::reap_sends(bool all) {
  Timer t;
  for (auto it = sends_.begin(); it != sends_.end();) {
    if (all) it->second.work->wait();
    it = (all || it->second.work->test()) ? sends_.erase(it) : std::next(it);
  }
  if (all) wait_seconds_ += t.seconds();
}

}  // namespace tessera::pipeline
