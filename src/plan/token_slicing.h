// TeraPipe's token-level pipeline (Li et al., ICML 2021) as the planner prices it: each sequence of a
// micro-batch is cut along its tokens into slices l_1..l_n (sum L), and slice i leaves stage k as soon
// as it is done, because causal attention at slice i needs only the keys and values of earlier tokens.
// With t_i the forward + backward time of one stage on slice i (which attends to c_i = l_1 + ... +
// l_{i-1} cached tokens besides its own), m micro-batches sliced alike and K stages, the pipeline's
// latency is
//   T = m * sum_i t_i + (K - 1) * max_i t_i
// (TeraPipe's latency model; unsliced, n = 1, it is GPipe's (m + K - 1) t). The slicing that minimises
// it is TeraPipe's dynamic program (its `latency_model.py`): for each candidate bound t_max on a slice's
// time, in ascending order, the least sum of slice times with every slice within the bound,
//   S(0) = 0,  S(n) = min over k with t(k, n - k) <= t_max of S(n - k) + t(k, n - k),
// in units of `unit` tokens; the best m * S(L) + (K - 1) * (the largest slice time used) wins, and the
// search stops once (K - 1) * t_max alone exceeds the best.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "plan/cluster.h"
#include "plan/layout.h"

namespace tessera::plan {

// Seconds of one stage's forward + backward on a slice of `length` tokens after `context` earlier ones.
using SliceCost = std::function<double(int64_t length, int64_t context)>;

// T above for the slice lengths `slices` (in order), m micro-batches and K stages.
double token_pipeline_latency(const std::vector<int64_t>& slices, const SliceCost& t, int64_t micro_batches,
                              int stages);

// The slicing of `length` tokens into multiples of `unit` (length must be one) with the least latency.
std::vector<int64_t> best_token_slicing(int64_t length, int64_t unit, const SliceCost& t, int64_t micro_batches,
                                        int stages);

// t(l, c) from the planner's time model for the layout: the slowest stage's forward and backward (compute
// and exposed tensor-parallel communication) on a micro-batch of sequence length l, plus the attention of
// its l queries to the c cached keys in each of the stage's layers, plus two point-to-point transfers
// (the slice's activation in, its gradient out).
SliceCost stage_slice_cost(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d);

// --pipeline-token-slices: "auto" (best_token_slicing in units of 8 tokens), a count n (n equal slices;
// it must divide the sequence) or a comma-separated list of lengths summing to the sequence. Throws an
// Error naming the flag and the rule otherwise.
std::vector<int64_t> parse_token_slices(const std::string& value, int64_t seq_length, const SliceCost& t,
                                        int64_t micro_batches, int stages);

}  // namespace tessera::plan
