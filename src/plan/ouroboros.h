// The price of Ouroboros (--pipeline-schedule ouroboros, docs/ouroboros.md) as Tessera runs it: K modules
// on P = K - 1 pipeline ranks, rank 0 holding the first and the last (the tied embedding's two ends).
// Each iteration runs the mini-batch's forward module by module around the ring (module k's m
// micro-batches, then the activation's hand-off to the next module's rank), then every rank's backward
// at once with the error gradients of the previous iteration: no rank waits for a later module's
// backward, which is the backward locking Ouroboros removes. What remains is the forward chain: a rank
// idles while the other modules run their forward. The delays cost memory: module k (0-based) keeps
// K - 1 - k earlier versions of its weights and the activations of K - 1 - k more mini-batches.
#pragma once

#include <vector>

#include "model/config.h"
#include "plan/cluster.h"
#include "plan/layout.h"

namespace tessera::plan {

struct OuroborosPlan {
  int modules = 0;                            // K
  std::vector<double> module_forward;         // seconds of module k's forward of one mini-batch (m micro-batches)
  std::vector<double> module_backward;        // and its backward
  double forward_chain = 0;                   // every module's forward plus the K - 1 hand-offs
  std::vector<double> rank_backward;          // per rank: its modules' backward
  double error_gradients = 0;                 // the error gradients' transfer at the step's end
  std::vector<double> rank_optimizer;         // per rank: the optimizer step over its modules
  double iteration = 0;                       // forward_chain + the slowest rank's backward, transfer and step
  std::vector<double> rank_idle;              // per rank: the iteration less its own work
  std::vector<double> weight_copy_bytes;      // per rank: the earlier weight versions its modules keep
  std::vector<double> activation_copy_bytes;  // per rank: the activations of the extra mini-batches held
};

// Needs l.pp = K - 1 > 0 and the layers a multiple of K (the trainer's rules for the schedule).
OuroborosPlan plan_ouroboros(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d);

}  // namespace tessera::plan
