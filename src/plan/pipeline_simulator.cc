#include "plan/pipeline_simulator.h"

#include <algorithm>

#include "core/check.h"

namespace tessera::plan {

using pipeline::ChunkId;
using pipeline::Op;
using pipeline::OpKind;

PipelineRun simulate_pipeline(const pipeline::ScheduleShape& shape, const PipelineCosts& costs, bool record_events) {
  PipelineCosts slice = costs;
  for (auto* grid : {&slice.forward_compute, &slice.forward_comm, &slice.backward_compute, &slice.backward_comm,
                     &slice.expert_comm})
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
  for (int r = 0; r < p; ++r) ops[r] = pipeline::build_schedule(shape, r);

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
  auto event = [&](int r, std::string name, const char* category, double start, double duration) {
    if (record_events && duration > 0) run.events.push_back({r, std::move(name), category, start, duration});
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
          arrival[forward ? 0 : 1][to.stage][slot_of(op, to.chunk)] = now + costs.p2p_transfer;
        } else if (op.kind == OpKind::RecvForward || op.kind == OpKind::RecvBackward) {
          const double lands = arrival[op.kind == OpKind::RecvForward ? 0 : 1][r][slot];
          if (lands < 0) break;  // the peer has not sent it yet: run the other ranks first
          const double wait = std::max(0.0, lands - now);
          // Of the wait, up to the flight time is communication; the rest is the neighbour being busy.
          const double transfer = std::min(wait, costs.p2p_transfer), idle = wait - transfer;
          event(r, "idle", "idle", now, idle);
          event(r, pipeline::to_string(op), "p2p", now + idle, transfer + costs.p2p_local);
          run.p2p[r] += transfer + costs.p2p_local;
          now += wait + costs.p2p_local;
        } else {
          const bool forward = op.kind == OpKind::Forward;
          const double compute = forward ? costs.forward_compute[r][op.chunk] : costs.backward_compute[r][op.chunk];
          const double comm = forward ? costs.forward_comm[r][op.chunk] : costs.backward_comm[r][op.chunk];
          event(r, pipeline::to_string(op), forward ? "forward" : "backward", now, compute + comm);
          run.compute[r] += compute;
          run.tp_comm[r] += comm;
          now += compute + comm;
          in_flight[r] += forward ? 1 : -1;
          run.peak_in_flight[r] = std::max(run.peak_in_flight[r], in_flight[r]);
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
