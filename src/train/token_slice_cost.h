// The slice cost that --pipeline-token-slices auto hands TeraPipe's dynamic program
// (pipeline/token_slicing_search.h). The planner's time model, priced from the calibration when there is one, is
// the better cost, but `plan` sits above `train`: `tessera train` (apps/train_command.cc) passes it in
// through parse_train_arguments as a TokenSliceCostModel. Without one (a library caller, the tests)
// training uses the stated model below, so `auto` always has a cost and always gives the same slicing
// for the same flags, on every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "pipeline/token_slicing_search.h"

namespace tessera::train {

struct TrainArguments;

// A stage's forward + backward seconds per slice, and where the numbers come from (the start-up line).
struct TokenSliceCosts {
  pipeline::SliceCost cost;
  std::string source;
};

// Builds the cost for a run whose other flags are final (it may read the model, the layout, the batch).
using TokenSliceCostModel = std::function<TokenSliceCosts(const TrainArguments&)>;

// The stated model: per layer of a stage and per slice, a fixed kStatedSliceOverheadSeconds (the
// slice's ~20 kernel launches forward and backward, and its small GEMMs' lost efficiency: TeraPipe's
// reason not to cut finer) plus the slice's FLOPs at kStatedFlopsPerSecond: 6 * l * (the layer's GEMM
// weights on this rank) for its GEMMs forward and backward, and 12 * (this rank's heads) * head dim *
// (l * c + l * (l + 1) / 2) for causal attention to its c cached and its own earlier tokens.
inline constexpr double kStatedSliceOverheadSeconds = 100e-6;
inline constexpr double kStatedFlopsPerSecond = 50e9;
TokenSliceCosts stated_token_slice_cost(const TrainArguments& a);
// The layers the stated model prices a stage at: the most any stage builds under the run's split
// (pipeline::stage_layer_count: --decoder-first/last-pipeline-num-layers and
// --account-for-embedding/loss-in-pipeline-split), since TeraPipe's slices go at the slowest stage's pace.
int64_t stated_slice_cost_layers(const TrainArguments& a);

}  // namespace tessera::train
