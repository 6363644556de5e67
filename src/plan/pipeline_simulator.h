// Runs the pipeline schedule's real op lists (pipeline::build_schedule) against each other with per-rank,
// per-chunk costs, the way the executor runs them: a rank does its operations in order; a receive waits
// for the matching send plus the transfer time; sends do not block. The pipeline bubble is what is
// left of a rank's time after its own work: it comes out of the simulation, not from (p - 1) / m.
// pipeline::simulate_ops has one cost per op kind; the planner needs stage-dependent costs (the
// embedding on the first stage, the output layer on the last), tensor-parallel communication inside an
// op, and the timeline for the Chrome trace.
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedules.h"

namespace tessera::plan {

// Seconds per (micro-batch, chunk) op on each pipeline rank: cost[stage][chunk]; with token slices
// (TeraPipe) per (micro-batch, chunk, slice) op, one PipelineCosts per slice (plan/token_slicing_price.h).
// p2p_transfer and p2p_local are per message, i.e. a slice's.
struct PipelineCosts {
  std::vector<std::vector<double>> forward_compute, forward_comm;    // comm: exposed tensor-parallel collectives
  std::vector<std::vector<double>> backward_compute, backward_comm;  // backward includes any recomputation
  // Part of backward_compute: the weight gradients, which zero-bubble schedules run as a W op of their own
  // (B gets the rest); empty: none split off (W free, B the whole backward).
  std::vector<std::vector<double>> backward_weight_compute;
  double p2p_transfer = 0;  // a send's flight time to the neighbour (cross-node, 1/tp of the activation)
  double p2p_local = 0;     // the receiver's work on arrival (the all-gather of the scatter/gather optimisation)
  // Not simulated, reported: the part of forward_comm + backward_comm that is expert-parallel (an MoE
  // layer's token dispatch and combine), per (stage, chunk); empty for a dense model.
  std::vector<std::vector<double>> expert_comm;
  // Likewise the part that is the ring's exposed exchange under context parallelism; empty at cp 1.
  std::vector<std::vector<double>> context_comm;
};

struct TimelineEvent {
  int stage;
  std::string name;      // "F3.1": forward of micro-batch 3 on chunk 1; "RF3.1", "B3.1", "SB3.1", ...
  std::string category;  // "forward", "backward", "weight" (a zero-bubble W), "p2p", "idle"
  double start, duration;
};

struct PipelineRun {
  double makespan = 0;
  std::vector<double> finish;        // per stage: when its last op ends
  std::vector<double> compute;       // per stage: forward + backward compute seconds
  std::vector<double> tp_comm;       // per stage: exposed tensor-parallel communication seconds
  std::vector<double> p2p;           // per stage: seconds spent receiving (transfer + local gather)
  std::vector<double> bubble;        // per stage: finish - compute - tp_comm - p2p (waiting for neighbours)
  std::vector<int> peak_in_flight;   // per stage: (micro-batch, chunk, slice) forwards held at once (to their W
                                     // under zero bubble)
  std::vector<TimelineEvent> events;  // when asked for
};

// Throws an Error naming the blocked op of each rank if the op lists deadlock. slice_costs[i] prices the
// ops of token slice i (shape.slices of them: each slice's length and the context it attends to make
// it cost what it does).
PipelineRun simulate_pipeline(const pipeline::ScheduleShape& shape, const std::vector<PipelineCosts>& slice_costs,
                              bool record_events);
// The same with n = shape.slices equal slices each costing 1/n of `costs`' compute and communication and
// a whole message's p2p time (no fixed per-slice cost).
PipelineRun simulate_pipeline(const pipeline::ScheduleShape& shape, const PipelineCosts& costs, bool record_events);

}  // namespace tessera::plan
