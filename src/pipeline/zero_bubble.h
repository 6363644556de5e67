// Zero-bubble pipeline schedules (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024). Each
// backward pass is split in two: B, the gradient of the chunk's input, which the previous stage waits for,
// and W, the gradients of the chunk's weights, which only the optimizer step needs. W passes can then run
// whenever a stage would otherwise wait, filling the pipeline's bubble.
//
//   ZB-H1 (--enable-zero-bubble): 1F1B's placement, one chunk per rank.
//   ZB-V (--zero-bubble-v-schedule): two chunks per rank in a V, rank r holding model chunks r and
//     2p - 1 - r, so rank 0 holds both the first chunk (embedding) and the last (loss) and the turn at rank
//     p - 1 needs no transfer.
// Memory: a (micro-batch, chunk)'s activations count from its F to its W (W needs the layers' inputs and
// output gradients), and every rank holds at most what 1F1B holds at its peak, on rank 0: min(p, m)
// micro-batches (ZB-V: min(p, m) per chunk, each chunk half the layers). 1F1B's later ranks hold fewer
// (p - r); zero bubble spends that slack on deferred W passes.
//
// Both are built as the paper's automatic scheduler builds them: a greedy list schedule simulated over all
// ranks with the given costs. Whenever a rank is free it runs, in this order, a B whose input gradient has
// arrived (B is on the critical path), else the next F whose input has arrived if the memory bound (and
// the bound on deferred W passes) allows, else its oldest deferred W, else it waits for the next arrival.
// The lists come from one consistent simulated run, so run against each other (sends never block) they
// cannot deadlock, whatever the real costs. With F = B = W and m >= p the bubble is about (p + 1) units
// for ZB-H1 (the paper's hand-made ZB-H1: (p - 1)(F + B - W) = p - 1; 1F1B: 3 (p - 1)) and a few units for
// ZB-V (schedules_test and zero_bubble_test check the numbers; docs/parallelism.md has the pictures).
#pragma once

#include <vector>

#include "pipeline/schedules.h"

namespace tessera::pipeline {

// Seconds of one (micro-batch, chunk)'s F, B and W, and of one transfer between ranks. Only their ratios
// shape the schedule; training uses F = B = W (ScheduleShape alone, build_schedule).
struct ZeroBubbleCosts {
  double forward = 1, backward_input = 1, backward_weight = 1, p2p = 0;
};

// Every rank's op list (index: pipeline rank) for a shape with zero_bubble set (validate_schedule).
// Receives and sends surround the compute ops as in build_schedule. forward_only: the forwards alone.
std::vector<std::vector<Op>> build_zero_bubble_schedules(const ScheduleShape& shape, const ZeroBubbleCosts& costs,
                                                         bool forward_only = false);

// The most (micro-batch, chunk) activations, F to W, a rank holds at once: v min(p, m) (half of them
// on each chunk for ZB-V). `stage` is for symmetry with theoretical_peak_in_flight: every rank has the same.
int zero_bubble_activation_limit(const ScheduleShape& shape, int stage);

// The bubble with F = B = W (the training schedule's costs) as a fraction of the compute time 3 m v, as
// the unit-cost simulation of the lists measures it.
double zero_bubble_theoretical_bubble(const ScheduleShape& shape);

}  // namespace tessera::pipeline
