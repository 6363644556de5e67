// The rules of --pipeline-token-slices (TeraPipe's token slicing, model/token_sliced_chunk.h). On one stage the
// slices run one after another with the key/value caches; across pipeline stages the 1F1B schedule runs
// them slice by slice (pipeline/schedules.h). The layouts and features whose composition with slices is
// not built (or not tested) yet are refused, naming the flag. `auto` runs TeraPipe's dynamic program
// (pipeline/token_slicing_search.h) here, after every other rule, with the run's cost model
// (train/token_slice_cost.h): a pure function of the flags, so every rank chooses the same slices.
#include <numeric>

#include "model/token_sliced_chunk.h"
#include "pipeline/token_slicing_search.h"
#include "train/args/argument_rules.h"
#include "train/args/arguments.h"

namespace tessera::train {

using rules::require;

void finalize_token_slices(TrainArguments& a) {
  a.token_slices.clear();
  if (a.pipeline_token_slices.empty()) return;
  const std::string& v = a.pipeline_token_slices;
  const char* flag = "--pipeline-token-slices";
  if (v == "auto") {
    // Multiples of TeraPipe's 8 tokens, and under sequence parallelism of the tensor group as well, so that
    // whatever the program chooses passes the rules below.
    const int64_t unit = a.sequence_parallel ? std::lcm(pipeline::kTokenSliceUnit, a.tensor_model_parallel_size)
                                             : pipeline::kTokenSliceUnit;
    require(a.model.seq_length % unit == 0, flag, v,
            str_cat("--seq-length=", a.model.seq_length, " must be a multiple of ", unit, " (the slicing's unit: ",
                    pipeline::kTokenSliceUnit, " tokens",
                    a.sequence_parallel ? ", and a multiple of --tensor-model-parallel-size with --sequence-parallel"
                                        : "", ")"));
    const TokenSliceCosts costs =
        a.token_slice_cost_model ? a.token_slice_cost_model(a) : stated_token_slice_cost(a);
    a.token_slices = pipeline::best_token_slicing(a.model.seq_length, unit, costs.cost, a.num_micro_batches,
                                                  static_cast<int>(a.pipeline_model_parallel_size));
    a.token_slices_source = costs.source;
  } else {
    a.token_slices = model::parse_token_slice_lengths(v, a.model.seq_length);
  }
  require(a.virtual_pipeline_size == 1, flag, v,
          str_cat("cannot be combined with the interleaved schedule (--num-virtual-stages-per-pipeline-rank ",
                  a.virtual_pipeline_size, ") yet: the token slices flow through one model chunk per stage "
                  "(1F1B over the slices)"));
  if (a.sequence_parallel)  // each slice's rows are split over the tensor group
    for (int64_t l : a.token_slices)
      require(l % a.tensor_model_parallel_size == 0, flag, v,
              str_cat("slice length ", l, " must be divisible by --tensor-model-parallel-size=",
                      a.tensor_model_parallel_size, " with --sequence-parallel"));
  require(a.model.family == "gpt", flag, v, str_cat("needs a causal GPT model (got --model-family ", a.model.family, ")"));
  require(!a.reset_attention_mask, flag, v, "cannot be combined with --reset-attention-mask yet");
  require(!a.model.moe.enabled(), flag, v, "cannot be combined with mixture-of-experts layers yet (their "
          "load-balancing losses are per micro-batch)");
  require(!a.kd, flag, v, "cannot be combined with --kd yet");
}

}  // namespace tessera::train
