// One pre-LN transformer layer (Megatron's ParallelTransformerLayer on one rank):
//   h = x + dropout(proj(attention(rope(qkv(norm1(x))))))
//   y = h + dropout(fc2(act(fc1(norm2(h)))))
// Activations are [seq, batch, hidden] (Megatron's [s, b, h]); row t of a 2-D view is (s, b) = (t / B, t % B).
#pragma once

#include <memory>

#include "model/modules.h"

namespace tessera::model {

// What the backward of one layer needs from its forward, for one micro-batch.
struct LayerActivations {
  Tensor input;
  Tensor ln1, ln1_mean, ln1_rstd;
  Tensor q, k, v;  // after rotary embedding: [T, heads, d], [T, groups, d], [T, groups, d]
  Tensor attn, lse;
  Tensor residual;  // h
  Tensor ln2, ln2_mean, ln2_rstd;
  Tensor fc1, act;

  int64_t bytes() const;  // of every tensor held (each is its own allocation)
  // Under mixed precision the activations (not the norm statistics or the log-sum-exp) are kept in the
  // 16-bit type t, as Megatron keeps them; with_fp32_activations() is a copy with them back in fp32.
  void store_activations_as(DType t);
  LayerActivations with_fp32_activations() const;
};

// One layer's keys and values for incremental decoding of one sequence: [capacity, query groups on this
// rank, head dim], positions 0 .. (tokens fed so far) - 1 filled.
struct KvCache {
  Tensor k, v;
};

class TransformerLayer {
 public:
  // layer_number is 1-based and global (across pipeline stages), as in Megatron.
  // Attention heads, query groups and MLP columns are split over tp's group (Megatron's tensor
  // parallelism); with tp.sequence_parallel the residual stream is [seq/tp, batch, hidden] per rank.
  TransformerLayer(const ModelConfig& config, int64_t layer_number, ParameterSet& params,
                   const parallel::TensorParallelContext& tp);

  // x [T (/tp when sequence parallel), hidden] -> y shaped like x; positions [T] for rotary embeddings.
  Tensor forward(const Tensor& x, const int32_t* positions, const ForwardContext& ctx, LayerActivations& rec) const;
  // dy [T, hidden] -> dx [T, hidden]; accumulates parameter gradients.
  Tensor backward(const Tensor& dy, const int32_t* positions, const ForwardContext& ctx,
                  const LayerActivations& rec) const;

  // Inference on the next n tokens of one sequence (x [n, hidden], no dropout, no record): appends their
  // keys and values at rows [past, past + n) of the cache and attends over everything cached.
  // Needs a model built without sequence parallelism.
  Tensor forward_incremental(const Tensor& x, const int32_t* positions, int64_t past, KvCache& cache) const;
  KvCache make_kv_cache(int64_t capacity) const;

 private:
  enum DropoutSite { kAttentionProbs = 1, kAttentionOutput = 2, kMlpOutput = 3 };
  void hidden_dropout(const Tensor& x, const ForwardContext& ctx, int site, bool backward) const;

  const ModelConfig& config_;
  int64_t layer_number_;
  const parallel::TensorParallelContext& tp_;
  int64_t heads_, groups_;  // on this rank
  Norm input_norm_, pre_mlp_norm_;
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
  ColumnParallelLinear fc1_;
  RowParallelLinear fc2_;
};

}  // namespace tessera::model
