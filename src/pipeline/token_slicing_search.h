// TeraPipe's slicing (Li et al., ICML 2021), the pure dynamic program: each sequence of a micro-batch is
// cut along its tokens into slices l_1..l_n (sum L), and slice i leaves stage k as soon as it is done,
// because causal attention at slice i needs only the keys and values of earlier tokens. With t_i the
// forward + backward time of one stage on slice i (which attends to c_i = l_1 + ... + l_{i-1} cached
// tokens besides its own), m micro-batches sliced alike and K stages, the pipeline's latency is
//   T = m * sum_i t_i + (K - 1) * max_i t_i
// (TeraPipe's latency model; unsliced, n = 1, it is GPipe's (m + K - 1) t). The slicing that minimises
// it is TeraPipe's dynamic program (its `latency_model.py`): for each candidate bound t_max on a slice's
// time, in ascending order, the least sum of slice times with every slice within the bound,
//   S(0) = 0,  S(n) = min over k with t(k, n - k) <= t_max of S(n - k) + t(k, n - k),
// in units of `unit` tokens; the best m * S(L) + (K - 1) * (the largest slice time used) wins, and the
// search stops once (K - 1) * t_max alone exceeds the best.
//
// It lives here, below both, because training (`--pipeline-token-slices auto`) and the planner (which
// prices t from its time model, plan/token_slicing_price.h) both run it; the cost function is the caller's.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace tessera::pipeline {

// TeraPipe's slicing unit (its STEP_GAP): `auto` cuts sequences into multiples of 8 tokens.
constexpr int64_t kTokenSliceUnit = 8;

// Seconds of one stage's forward + backward on a slice of `length` tokens after `context` earlier ones.
using SliceCost = std::function<double(int64_t length, int64_t context)>;

// T above for the slice lengths `slices` (in order), m micro-batches and K stages. sequence_seconds: work
// that runs once per micro-batch over the whole sequence on the last stage, between its last slice's
// forward and that slice's backward, whatever the slicing (multi-token prediction's modules:
// model/sliced_multi_token_prediction.h); it lies on the last stage's path, which it lengthens by
// m * sequence_seconds: T = m * (sum_i t_i + sequence_seconds) + (K - 1) * max_i t_i. (t excludes it.)
double token_pipeline_latency(const std::vector<int64_t>& slices, const SliceCost& t, int64_t micro_batches,
                              int stages, double sequence_seconds = 0);

// The slicing of `length` tokens into multiples of `unit` (length must be one) with the least latency.
// Deterministic: the same cost function gives the same slicing on every rank. Work that runs once over the
// whole sequence (token_pipeline_latency's sequence_seconds) adds the same to every slicing's latency, so
// it does not move the best one and is not asked for.
std::vector<int64_t> best_token_slicing(int64_t length, int64_t unit, const SliceCost& t, int64_t micro_batches,
                                        int stages);

}  // namespace tessera::pipeline
