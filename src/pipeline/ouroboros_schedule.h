// Ouroboros (Yang et al., NeurIPS 2019; docs/ouroboros.md): the delayed-gradient rule written as data.
// K modules of consecutive layers; at iteration t every module runs the forward of mini-batch t with the
// current weights, and module k (0-based here, k = 0 .. K-1) runs the backward of mini-batch
// t - (K - 1 - k) with the weights of that iteration, using the error gradient module k + 1 produced for
// that mini-batch one iteration earlier. The first --ouroboros-warmup-iters iterations are synchronous.
//
// The single-process emulation (train/ouroboros_driver) and the MPI run both follow these functions, so
// that they agree on which (module, mini-batch, weight version) each gradient comes from.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::pipeline {

struct OuroborosShape {
  int modules = 2;             // K >= 1 (K = pipeline ranks + 1 in the MPI run)
  int64_t warmup_iters = 0;    // N: iterations 0 .. N-1 are plain backpropagation
};

// Throws an Error naming the rule unless K >= 1 and N >= 0.
void validate_ouroboros(const OuroborosShape& shape);

// How many iterations module k's gradient is late at iteration t: 0 during the warm-up, K - 1 - k after.
int ouroboros_delay(const OuroborosShape& shape, int module, int64_t iteration);

// The mini-batch whose gradient module k applies at iteration t: t - delay, or -1 when there is none:
// after the warm-up, a mini-batch of the warm-up was already applied synchronously, so the module waits
// until the first delayed mini-batch (N) reaches it.
int64_t ouroboros_backward_batch(const OuroborosShape& shape, int module, int64_t iteration);

// Whether module k must keep the activations of mini-batch t's forward beyond iteration t (its backward
// comes later): from the warm-up's end on, for every module but the last.
bool ouroboros_keeps_record(const OuroborosShape& shape, int module, int64_t iteration);

// What module k does at iteration t.
struct OuroborosStep {
  int module = 0;
  int64_t forward_batch = 0;    // = t, with the weights of iteration t (the current ones)
  int64_t backward_batch = -1;  // ouroboros_backward_batch; -1: no backward and no update this iteration
  int64_t weight_version = -1;  // the iteration whose weights the backward uses (= backward_batch)
  // Where the output gradient of that backward comes from: the iteration at which module k + 1 ran its
  // backward of the same mini-batch (-1 for the last module, which starts from the loss).
  int64_t output_grad_from_iteration = -1;
};

// Every module's step at iteration t, module 0 first.
std::vector<OuroborosStep> ouroboros_iteration(const OuroborosShape& shape, int64_t iteration);

// The pipeline rank that holds module k when K - 1 ranks hold K modules: module k on rank k, the last
// module on rank 0 beside the first (they share the tied embedding). K = 1: rank 0.
int ouroboros_rank_of_module(const OuroborosShape& shape, int module);

// The most past weight versions module k needs at once (the current weights not counted): K - 1 - k
// after the warm-up, 0 for the last module.
int ouroboros_weight_versions(const OuroborosShape& shape, int module);

}  // namespace tessera::pipeline
