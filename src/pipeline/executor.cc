#include "pipeline/executor.h"

#include "core/timer.h"

namespace tessera::pipeline {
namespace {

bool is_recv(const Op& op) { return op.kind == OpKind::RecvForward || op.kind == OpKind::RecvBackward; }

}  // namespace

PipelineTimes& PipelineTimes::operator+=(const PipelineTimes& o) {
  forward += o.forward, backward += o.backward, p2p_wait += o.p2p_wait, total += o.total;
  iterations += o.iterations;
  backward_weight += o.backward_weight;
  forward_passes += o.forward_passes, backward_passes += o.backward_passes, weight_passes += o.weight_passes;
  return *this;
}

void run_schedule(const std::vector<Op>& ops, PipelineP2P* p2p, const StageCallbacks& callbacks,
                  PipelineTimes& times) {
  Timer total;
  const double wait_before = p2p ? p2p->wait_seconds() : 0;
  size_t posted = 0;  // receives of ops[0, posted) have been posted
  Tensor received, produced;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (p2p) {  // post the receives up to the compute op after the next one
      int computes = 0;
      for (; posted < ops.size() && computes < 2; ++posted) {
        computes += is_compute(ops[posted]);
        if (is_recv(ops[posted])) p2p->post_recv(ops[posted]);
      }
    }
    switch (op.kind) {
      case OpKind::RecvForward:
      case OpKind::RecvBackward:
        TESSERA_CHECK(p2p, "pipeline op ", to_string(op), " on a single stage");
        received = p2p->wait_recv(op);
        break;
      case OpKind::SendForward:
      case OpKind::SendBackward:
        TESSERA_CHECK(p2p && produced.defined(), "pipeline op ", to_string(op), " has nothing to send");
        p2p->send(op, produced);
        produced = Tensor();  // the send holds it until it completes
        break;
      case OpKind::Forward: {
        Timer t;
        produced = callbacks.forward(op.micro_batch, op.chunk, op.slice, received);
        times.forward += t.seconds();
        ++times.forward_passes;
        received = Tensor();
        break;
      }
      case OpKind::Backward: {
        Timer t;
        produced = callbacks.backward(op.micro_batch, op.chunk, op.slice, received);
        times.backward += t.seconds();
        ++times.backward_passes;
        received = Tensor();
        if (p2p) p2p->reap_sends();
        break;
      }
      case OpKind::BackwardWeight: {
        TESSERA_CHECK(callbacks.backward_weight, "pipeline op ", to_string(op), ": this stage does not split its "
                      "backward into input and weight gradients (zero-bubble schedules need it)");
        Timer t;
        callbacks.backward_weight(op.micro_batch, op.chunk);
        const double seconds = t.seconds();
        times.backward += seconds;
        times.backward_weight += seconds;
        ++times.weight_passes;
        break;
      }
    }
  }
  if (p2p) {
    p2p->reap_sends(/*all=*/true);
    times.p2p_wait += p2p->wait_seconds() - wait_before;
  }
  times.total += total.seconds();
  ++times.iterations;
}

}  // namespace tessera::pipeline
