#include "train/token_slice_cost.h"

#include <algorithm>

#include "core/check.h"
#include "pipeline/schedules.h"
#include "train/args/arguments.h"

namespace tessera::train {

int64_t stated_slice_cost_layers(const TrainArguments& a) {
  const int stages = static_cast<int>(a.pipeline_model_parallel_size);
  // finalize_parallel_layout sets the split from the flags; a caller that built the arguments by hand
  // may not have: the same split from the same flags.
  const pipeline::LayerSplit split =
      a.layer_split.num_layers == a.model.num_layers
          ? a.layer_split
          : pipeline::LayerSplit{static_cast<int>(a.model.num_layers), static_cast<int>(a.decoder_first_pipeline_num_layers),
                                 static_cast<int>(a.decoder_last_pipeline_num_layers),
                                 a.account_for_embedding_in_pipeline_split, a.account_for_loss_in_pipeline_split};
  int64_t most = 0;
  for (int stage = 0; stage < stages; ++stage)
    most = std::max<int64_t>(most, pipeline::stage_layer_count(split, stages, stage));
  return most;
}

TokenSliceCosts stated_token_slice_cost(const TrainArguments& a) {
  const model::ModelConfig& c = a.model;
  const double tp = static_cast<double>(a.tensor_model_parallel_size);
  const double layers = static_cast<double>(stated_slice_cost_layers(a));
  const double h = static_cast<double>(c.hidden_size);
  // GEMM weights of one layer on this rank: the query/key/value and output projections, the MLP's two
  // (three under SwiGLU) matrices; each is split over the tensor group.
  const double weights = (h * static_cast<double>(c.qkv_size()) +
                          static_cast<double>(c.num_attention_heads * c.kv_channels) * h +
                          (c.swiglu ? 3.0 : 2.0) * h * static_cast<double>(c.ffn_hidden_size)) / tp;
  const double heads_dim = static_cast<double>(c.num_attention_heads * c.kv_channels) / tp;
  const double batch = static_cast<double>(a.micro_batch_size);
  TokenSliceCosts out;
  out.cost = [=](int64_t length, int64_t context) {
    const double l = static_cast<double>(length), ctx = static_cast<double>(context);
    const double flops = batch * (6 * l * weights + 12 * heads_dim * (l * ctx + l * (l + 1) / 2));
    return layers * (kStatedSliceOverheadSeconds + flops / kStatedFlopsPerSecond);
  };
  out.source = str_cat("the stated model: ", kStatedSliceOverheadSeconds * 1e6, " us per layer and slice plus its "
                       "FLOPs at ", kStatedFlopsPerSecond / 1e9, " GFLOP/s");
  return out;
}

}  // namespace tessera::train
