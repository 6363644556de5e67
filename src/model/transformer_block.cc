#include "model/transformer_block.h"

namespace tessera::model {

int64_t BlockRecord::bytes() const {
  int64_t total = 0;
  for (const LayerRecord& l : layers) total += l.bytes();
  return total;
}

TransformerBlock::TransformerBlock(const ModelConfig& config, int64_t first_layer, int64_t num_layers,
                                   ParameterSet& params, const parallel::TensorParallelContext& tp,
                                   const TransformerLayerSpec& spec) {
  for (int64_t l = first_layer; l < first_layer + num_layers; ++l) {
    offsets_.push_back(params.numel());
    layers_.push_back(std::make_unique<TransformerLayer>(config, l + 1, params, tp, spec));
  }
  offsets_.push_back(params.numel());
}

int64_t TransformerBlock::recompute_group_start(int64_t l) const {
  switch (recompute_.method) {
    case RecomputeMethod::None:
      return -1;
    case RecomputeMethod::Uniform:
      return l / recompute_.num_layers * recompute_.num_layers;
    case RecomputeMethod::Block:
      return l < recompute_.num_layers ? l : -1;
  }
  return -1;
}

Tensor TransformerBlock::forward(const Tensor& input, const Tensor& positions, const ForwardContext& ctx,
                                 BlockRecord& rec, const ParamHooks& hooks) const {
  rec.layers.resize(layers_.size());
  Tensor x = input;
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (hooks.params_needed_below) hooks.params_needed_below(offsets_[l + 1]);
    const int64_t group = recompute_group_start(static_cast<int64_t>(l));
    if (group < 0) {
      x = layers_[l]->forward(x, positions, ctx, rec.layers[l]);
      continue;
    }
    if (group == static_cast<int64_t>(l)) rec.layers[l].input = x;  // all that the group keeps
    LayerRecord discarded;
    x = layers_[l]->forward(x, positions, ctx, discarded);
  }
  return x;
}

Tensor TransformerBlock::backward(const Tensor& dy, const Tensor& positions, const ForwardContext& ctx,
                                  BlockRecord& rec, const ParamHooks& hooks) const {
  Tensor dx = dy;
  for (size_t l = layers_.size(); l-- > 0;) {
    const int64_t group = recompute_group_start(static_cast<int64_t>(l));
    if (group >= 0 && (l + 1 == layers_.size() || recompute_group_start(static_cast<int64_t>(l) + 1) != group)) {
      // Entering a recomputed group from its last layer: run its forward again from the kept input.
      Tensor y = rec.layers[group].input;
      for (size_t j = static_cast<size_t>(group); j <= l; ++j) y = layers_[j]->forward(y, positions, ctx, rec.layers[j]);
    }
    dx = layers_[l]->backward(dx, positions, ctx, rec.layers[l]);
    rec.layers[l] = LayerRecord();  // free as we go
    if (hooks.grads_final_from) hooks.grads_final_from(offsets_[l]);
  }
  return dx;
}

std::vector<KvCache> TransformerBlock::make_kv_caches(int64_t blocks, int64_t block_size) const {
  std::vector<KvCache> caches;
  for (const auto& layer : layers_) caches.push_back(layer->make_kv_cache(blocks, block_size));
  return caches;
}

Tensor TransformerBlock::decode(const Tensor& input, const DecodeLayout& layout, std::vector<KvCache>& caches) const {
  Tensor x = input;
  for (size_t l = 0; l < layers_.size(); ++l) x = layers_[l]->decode(x, layout, caches[l]);
  return x;
}

}  // namespace tessera::model
