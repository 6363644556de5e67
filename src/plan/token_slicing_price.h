// TeraPipe's token-level pipeline (Li et al., ICML 2021) as the planner prices it: the latency model and
// the slicing's dynamic program are pipeline/token_slicing_search.h's (training runs them too, for
// --pipeline-token-slices auto); the planner gives them its time model's slice cost.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "pipeline/token_slicing_search.h"
#include "plan/cluster.h"
#include "plan/layout.h"
#include "plan/pipeline_simulator.h"

namespace tessera::plan {

using pipeline::best_token_slicing;
using pipeline::SliceCost;
using pipeline::token_pipeline_latency;

// t(l, c) from the planner's time model for the layout: the slowest stage's forward and backward (compute
// and exposed tensor-parallel communication) on a micro-batch of sequence length l, plus the attention of
// its l queries to the c cached keys in each of the stage's layers, plus two point-to-point transfers
// (the slice's activation in, its gradient out). Without multi-token prediction's modules, which do not
// run per slice (sliced_mtp_seconds).
SliceCost stage_slice_cost(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d);

// Multi-token prediction under token slices (model/sliced_multi_token_prediction.h): the modules' forward
// and backward over the whole sequence (compute and exposed communication, time_model.h's mtp_times), run
// once per micro-batch on the head's stage after the last slice's forward; 0 without the modules.
// TeraPipe's latency takes it as token_pipeline_latency's sequence_seconds.
double sliced_mtp_seconds(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d);

// The pipeline simulator's costs of one token slice of `length` tokens after `context` earlier ones:
// pipeline_costs at the slice's length (fixed per-kernel costs and short GEMMs' row tiles included, see
// DeviceSpec) plus each layer's attention of the slice's queries to the cached keys; without multi-token
// prediction's modules.
PipelineCosts slice_pipeline_costs(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d, int64_t length,
                                   int64_t context);
// One PipelineCosts per slice of l.token_slices, in order; the last slice's head chunk also runs the
// multi-token prediction modules over the whole sequence (mtp_times: forward in its forward op, backward
// in its backward op), as the sliced chunk runs them.
std::vector<PipelineCosts> token_slice_costs(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d);

// A layout's token slices (l.token_slices) priced by TeraPipe's latency model against the unsliced
// pipeline (GPipe over the replica's micro-batches).
struct TokenSlicingPrice {
  std::vector<int64_t> slices;
  double sliced = 0, unsliced = 0;  // pipeline latency, seconds (both with the modules' whole-sequence work)
  // Bytes of one micro-batch's key/value caches on a stage: each of its layers' keys and values of the
  // whole sequence (this rank's query groups), in the activations' precision.
  double cache_bytes = 0;
};
TokenSlicingPrice price_token_slicing(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d);

// --pipeline-token-slices: "auto" (best_token_slicing in units of 8 tokens), a count n (n equal slices;
// it must divide the sequence) or a comma-separated list of lengths summing to the sequence. Throws an
// Error naming the flag and the rule otherwise.
std::vector<int64_t> parse_token_slices(const std::string& value, int64_t seq_length, const SliceCost& t,
                                        int64_t micro_batches, int stages);

}  // namespace tessera::plan
