#include "train/token_slice_cost.h"

#include "core/check.h"
#include "train/args/arguments.h"

namespace tessera::train {

TokenSliceCosts stated_token_slice_cost(const TrainArguments& a) {
  const model::ModelConfig& c = a.model;
  const double tp = static_cast<double>(a.tensor_model_parallel_size);
  const double layers = static_cast<double>(c.num_layers) / static_cast<double>(a.pipeline_model_parallel_size);
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
