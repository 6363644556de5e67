// A chunk's range of transformer layers (Megatron-Core's TransformerBlock): runs them in turn, applies
// the recompute policy, and reports where each layer's parameters lie in the flat buffers so that
// overlapped gradient reduction and parameter gathers can follow forward and backward layer by layer.
#pragma once

#include <memory>
#include <vector>

#include "model/transformer_layer.h"

namespace tessera::model {

struct BlockRecord {
  std::vector<LayerRecord> layers;  // a recomputed layer keeps only its group's input (on the first)
  int64_t bytes() const;
};

class TransformerBlock {
 public:
  // Layers [first_layer, first_layer + num_layers) (0-based, global), declared in `params` in order.
  TransformerBlock(const ModelConfig& config, int64_t first_layer, int64_t num_layers, ParameterSet& params,
                   const parallel::TensorParallelContext& tp, const TransformerLayerSpec& spec);
  void set_recompute(const Recompute& r) { recompute_ = r; }

  Tensor forward(const Tensor& x, const Tensor& positions, const ForwardContext& ctx, BlockRecord& rec,
                 const ParamHooks& hooks) const;
  Tensor backward(const Tensor& dy, const Tensor& positions, const ForwardContext& ctx, BlockRecord& rec,
                  const ParamHooks& hooks) const;

  // Each layer's decoding pool, and a decoding step through the layers (TransformerLayer::decode).
  std::vector<KvCache> make_kv_caches(int64_t blocks, int64_t block_size) const;
  Tensor decode(const Tensor& x, const DecodeLayout& layout, std::vector<KvCache>& caches) const;

  int64_t begin_offset() const { return offsets_.front(); }  // flat offset of the first layer's parameters
  int64_t end_offset() const { return offsets_.back(); }     // just past the last layer's

 private:
  // The first layer (chunk-local index) of the recomputed group that layer l belongs to, or -1 when l
  // keeps its activations.
  int64_t recompute_group_start(int64_t l) const;

  std::vector<std::unique_ptr<TransformerLayer>> layers_;
  std::vector<int64_t> offsets_;  // flat offset of each layer's first parameter, then the end
  Recompute recompute_;
};

}  // namespace tessera::model
