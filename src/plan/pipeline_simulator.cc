#include "plan/pipeline_simulator.h"

#include <algorithm>

#include "core/check.h"
#include "pipeline/zero_bubble.h"

namespace tessera::plan {
namespace {

// The costs a zero-bubble schedule is built with: as the paper's automatic scheduler, the profiled (here
// priced) F, B and W of a (micro-batch, chunk), averaged over the ranks, and the transfer. Without a
// weight-gradient price, equal costs (what `tessera train` builds its lists with).
pipeline::ZeroBubbleCosts zero_bubble_costs(const PipelineCosts& c) {
  if (c.backward_weight_compute.empty()) return {};
  double forward = 0, input = 0, weight = 0;
  int n = 0;
  for (size_t r = 0; r < c.forward_compute.size(); ++r)
    for (size_t j = 0; j < c.forward_compute[r].size(); ++j, ++n) {
      forward += c.forward_compute[r][j] + c.forward_comm[r][j];
      input += c.backward_compute[r][j] - c.backward_weight_compute[r][j] + c.backward_comm[r][j];
      weight += c.backward_weight_compute[r][j];
    }
  if (n == 0 || forward <= 0 || input <= 0 || weight <= 0) return {};
  return {forward / n, input / n, weight / n, c.p2p_transfer + c.p2p_local};
}

}  // namespace

using pipeline::ChunkId;
using pipeline::Op;
using pipeline::OpKind;

PipelineRun simulate_pipeline(const pipeline::ScheduleShape& shape, const PipelineCosts& costs, bool record_events) {
  PipelineCosts slice = costs;
  for (auto* grid : {&slice.forward_compute, &slice.forward_comm, &slice.backward_compute, &slice.backward_comm,
                     &slice.backward_weight_compute, &slice.expert_comm})
    for (auto& stage : *grid)
      for (double& seconds : stage) seconds /= shape.slices;
  return simulate_pipeline(shape, std::vector<PipelineCosts>(shape.slices, slice), record_events);
}

PipelineRun simulate_pipeline(const pipeline::ScheduleShape& shape, const std::vector<PipelineCosts>& slice_costs,
                              bool record_events) {
  const int p = shape.stages, v = shape.chunks, m = shape.micro_batches, n = shape.slices;
  TESSERA_CHECK(static_cast<int>(slice_costs.size()) == n, "simulate_pipeline: costs for ", slice_costs.size(),
                " token slices, the schedule has ", n);
  for (const PipelineCosts& costs : slice_costs)
    TESSERA_CHECK(static_cast<int>(costs.forward_compute.size()) == p, "simulate_pipeline: costs for ",
                  costs.forward_compute.size(), " stages, the schedule has ", p);
  std::vector<std::vector<Op>> ops(p);
  if (shape.zero_bubble != pipeline::ZeroBubble::Off) ops = pipeline::build_zero_bubble_schedules(shape, zero_bubble_costs(slice_costs[0]));
  else
    for (int r = 0; r < p; ++r) ops[r] = pipeline::build_schedule(shape, r);
  // Zero-bubble schedules split each backward into B (the input gradient) and W (the weight gradients),
  // and a forward's activations are held until its W.
  const bool split = shape.zero_bubble != pipeline::ZeroBubble::Off;
  auto weight_part = [&](const PipelineCosts& costs, int r, int chunk) {
    return split && !costs.backward_weight_compute.empty() ? costs.backward_weight_compute[r][chunk] : 0.0;
  };

  // arrival[direction][stage][(micro_batch * n + slice) * v + chunk]: when the message for that receive
  // lands (< 0: not sent).
  auto slot_of = [&](const Op& op, int chunk) {
    return (static_cast<size_t>(op.micro_batch) * n + static_cast<size_t>(op.slice)) * v + chunk;
  };
  std::vector<std::vector<std::vector<double>>> arrival(
      2, std::vector<std::vector<double>>(p, std::vector<double>(static_cast<size_t>(m) * n * v, -1.0)));
  PipelineRun run;
  run.finish.assign(p, 0);
  run.compute.assign(p, 0);
  run.tp_comm.assign(p, 0);
  run.p2p.assign(p, 0);
  run.bubble.assign(p, 0);
  run.peak_in_flight.assign(p, 0);
  std::vector<size_t> next(p, 0);
  std::vector<double> clock(p, 0.0);
  std::vector<int> in_flight(p, 0);
  // (An op's name is formatted only when the timeline is kept: a search simulates thousands of lists.)
  auto event = [&](int r, const Op* op, const char* category, double start, double duration) {
    if (record_events && duration > 0) run.events.push_back({r, op ? pipeline::to_string(*op) : "idle", category, start, duration});
  };

  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < ops[r].size()) {
        const Op& op = ops[r][next[r]];
        const PipelineCosts& costs = slice_costs[op.slice];
        const size_t slot = slot_of(op, op.chunk);
        double& now = clock[r];
        if (op.kind == OpKind::SendForward || op.kind == OpKind::SendBackward) {
          const bool forward = op.kind == OpKind::SendForward;
          ChunkId to = forward ? pipeline::next_chunk(shape, {r, op.chunk}) : pipeline::previous_chunk(shape, {r, op.chunk});
          // (ZB-V's turn at the last rank hands the activation to the rank's own other chunk: no transfer.)
          arrival[forward ? 0 : 1][to.stage][slot_of(op, to.chunk)] = now + (to.stage == r ? 0 : costs.p2p_transfer);
        } else if (op.kind == OpKind::RecvForward || op.kind == OpKind::RecvBackward) {
          const double lands = arrival[op.kind == OpKind::RecvForward ? 0 : 1][r][slot];
          if (lands < 0) break;  // the peer has not sent it yet: run the other ranks first
          const double wait = std::max(0.0, lands - now);
          // Of the wait, up to the flight time is communication; the rest is the neighbour being busy.
          const double transfer = std::min(wait, costs.p2p_transfer), idle = wait - transfer;
          event(r, nullptr, "idle", now, idle);
          event(r, &op, "p2p", now + idle, transfer + costs.p2p_local);
          run.p2p[r] += transfer + costs.p2p_local;
          now += wait + costs.p2p_local;
        } else {
          const bool forward = op.kind == OpKind::Forward, weight = op.kind == OpKind::BackwardWeight;
          const double w = weight_part(costs, r, op.chunk);
          const double compute = forward  ? costs.forward_compute[r][op.chunk]
                                 : weight ? w
                                          : costs.backward_compute[r][op.chunk] - w;
          // The tensor-parallel collectives of backward carry the input gradient: they stay in B.
          const double comm = forward ? costs.forward_comm[r][op.chunk] : weight ? 0 : costs.backward_comm[r][op.chunk];
          event(r, &op, forward ? "forward" : weight ? "weight" : "backward", now, compute + comm);
          run.compute[r] += compute;
          run.tp_comm[r] += comm;
          now += compute + comm;
          if (forward || op.kind == (split ? OpKind::BackwardWeight : OpKind::Backward)) {
            in_flight[r] += forward ? 1 : -1;
            run.peak_in_flight[r] = std::max(run.peak_in_flight[r], in_flight[r]);
          }
        }
        ++next[r];
        progress = true;
      }
    }
  }
  std::string blocked;
  for (int r = 0; r < p; ++r)
    if (next[r] < ops[r].size()) blocked += str_cat(" rank ", r, " at ", pipeline::to_string(ops[r][next[r]]), ";");
  TESSERA_CHECK(blocked.empty(), "pipeline schedule deadlocks:", blocked);
  for (int r = 0; r < p; ++r) {
    run.finish[r] = clock[r];
    run.bubble[r] = std::max(0.0, clock[r] - run.compute[r] - run.tp_comm[r] - run.p2p[r]);
  }
  run.makespan = *std::max_element(clock.begin(), clock.end());
  return run;
}

}  // namespace tessera::plan
