// GPT: token (+ learned position) embedding, a stack of pre-LN transformer layers, a final norm and an
// output layer tied to the word embedding unless --untie-embeddings-and-output-weights, trained with
// next-token cross-entropy.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "model/transformer_layer.h"

namespace tessera::model {

// A micro-batch as the data pipeline produces it: sample-major [batch, seq].
struct MicroBatch {
  Tensor tokens;     // int32 [batch, seq]
  Tensor labels;     // int32 [batch, seq]: the next tokens
  Tensor loss_mask;  // fp32 [batch, seq]: 1 where the token counts in the loss
  Tensor positions;  // int32 [batch, seq], optional (default 0..seq-1; --reset-position-ids restarts them)
  Tensor doc_start;  // int32 [batch, seq], optional: each position attends only from here on
                     // (--reset-attention-mask: the first position of its document)
  int64_t sample_offset = 0;  // global index of the first sample (keys dropout)
};

// Everything backward needs from forward for one micro-batch.
struct GptActivations {
  Tensor tokens, labels, loss_mask, positions;  // [seq, batch] layout (row t = s * batch + b)
  Tensor doc_start;                             // [batch, seq] as given, or undefined
  std::vector<LayerActivations> layers;  // a recomputed layer keeps only its group's input (on the first)
  Tensor final_input, final_ln, final_mean, final_rstd;
  bool final_ln_rounded = false;  // final_ln holds values of the GEMM input type
  Tensor logits, lse;  // logits [T, padded vocab / tp] of this rank's vocabulary shard

  int64_t layer_bytes() const;  // held by the transformer layers' records
  // Everything the record holds from forward to backward: the layers' records, the micro-batch's ids,
  // and on the last chunk the final norm's tensors, the logits shard and the log-sum-exp.
  int64_t bytes() const;
};

// The key/value caches of every layer for incrementally decoding one sequence.
struct DecodeState {
  std::vector<KvCache> layers;
  int64_t length = 0;  // tokens fed so far
};

// Activation recomputation (Megatron's --recompute-granularity full with --recompute-method and
// --recompute-num-layers): the layers of a recomputed group keep only the group's input in forward and
// run their forward again in backward. Dropout masks are Philox values keyed by coordinates, so the
// recomputed forward is identical. (Selective recomputation of the core attention is what the tiled
// attention kernel always does: the seq x seq probabilities are never stored.)
enum class RecomputeMethod { None, Uniform, Block };
struct Recompute {
  RecomputeMethod method = RecomputeMethod::None;
  // Uniform: groups of this many consecutive layers of each chunk, each group keeping one input.
  // Block: the first this-many layers of each chunk are recomputed, one layer at a time.
  int64_t num_layers = 1;
};

// The part of the model one GptModel object holds (Megatron's pre_process / post_process): a range of
// layers, with the embedding when it is the model's first chunk and the final norm, output layer and
// loss when it is the last. Pipeline parallelism gives each rank one or more chunks.
struct ModelChunk {
  int64_t first_layer = 0;  // 0-based global layer number
  int64_t num_layers = -1;  // -1: all layers from first_layer on
  bool pre_process = true, post_process = true;
};

class GptModel {
 public:
  // Declares the parameters in `params` (allocate them before the first forward). With a tensor group
  // of several ranks, this rank's model holds its shard of every split layer (Megatron's tensor
  // parallelism) and the vocabulary is split too (vocab-parallel embedding and cross-entropy).
  // A last chunk without the embedding holds its own copy of the tied word embedding (tied_copy).
  GptModel(const ModelConfig& config, ParameterSet& params,
           const parallel::TensorParallelContext& tp = parallel::TensorParallelContext::single_process(),
           const ModelChunk& chunk = {});

  const ModelConfig& config() const { return config_; }
  const ModelChunk& chunk() const { return chunk_; }
  void set_recompute(const Recompute& r) { recompute_ = r; }

  // The whole model (a chunk that is both first and last): returns the sum over tokens of
  // loss * loss_mask and fills `rec` for backward.
  double forward(const MicroBatch& batch, const ForwardContext& ctx, GptActivations& rec) const;
  // Accumulates gradients of (grad_scale * sum of masked per-token losses) into the parameters' grads.
  // Consumes `rec` (its logits become dlogits). grads_final_from(offset), when given, is called as the
  // backward goes, each time every gradient at flat offset >= offset has received its last contribution
  // from this micro-batch (so data-parallel buckets can start reducing while backward continues).
  void backward(GptActivations& rec, const ForwardContext& ctx, float grad_scale,
                const std::function<void(int64_t)>& grads_final_from = {}) const;

  // One chunk's forward: from batch.tokens on the first chunk, else from `input` (the previous chunk's
  // output, [T (/tp under sequence parallelism), hidden]). Returns the output activation, or on the last
  // chunk an undefined tensor, adding the masked loss sum to *loss_sum. params_needed_below(end), when
  // given, is called before each part of the chunk (embedding, each layer, head) with the flat offset
  // below which that part's parameters lie, so that an overlapped parameter all-gather is waited for
  // bucket by bucket.
  Tensor forward_chunk(const MicroBatch& batch, const Tensor& input, const ForwardContext& ctx,
                       GptActivations& rec, double* loss_sum,
                       const std::function<void(int64_t)>& params_needed_below = {}) const;
  // One chunk's backward from the gradient of its output (ignored on the last chunk, which starts from
  // the loss); returns the gradient of its input (undefined on the first chunk).
  Tensor backward_chunk(GptActivations& rec, const Tensor& doutput, const ForwardContext& ctx, float grad_scale,
                        const std::function<void(int64_t)>& grads_final_from = {}) const;

  // Incremental decoding (inference, no sequence parallelism): an empty state for up to `capacity`
  // tokens, and the logits over the (padded) vocabulary after feeding the next tokens of the sequence.
  DecodeState start_decoding(int64_t capacity) const;
  Tensor next_token_logits(const std::vector<int32_t>& tokens, DecodeState& state) const;
  // The same through one pipeline chunk: the first chunk embeds `tokens`, the others take the previous
  // chunk's hidden states `input` [n, hidden] (every chunk needs `tokens` for their positions). Returns
  // the hidden states for the next chunk, or on the last chunk the last position's logits.
  Tensor decode_chunk(const std::vector<int32_t>& tokens, const Tensor& input, DecodeState& state) const;

 private:
  Tensor embed(GptActivations& rec, const ForwardContext& ctx) const;
  // The first layer (chunk-local index) of the recomputed group that layer l belongs to, or -1 when l
  // keeps its activations.
  int64_t recompute_group_start(int64_t l) const;
  const Parameter& output_parameter() const;
  const float* output_weight() const;
  float* output_weight_grad() const;

  ModelConfig config_;
  const parallel::TensorParallelContext& tp_;
  const ParameterSet* params_;
  ModelChunk chunk_;
  Recompute recompute_;
  int64_t vocab_begin_, vocab_local_;  // this rank's vocabulary shard
  int64_t first_offset_ = 0;           // flat offset of this chunk's first parameter
  Parameter* word_embeddings_ = nullptr;  // or its tied copy on a last chunk
  Parameter* position_embeddings_ = nullptr;
  std::vector<std::unique_ptr<TransformerLayer>> layers_;
  std::vector<int64_t> layer_offsets_;  // flat offset of each layer's first parameter
  int64_t final_norm_offset_ = 0;
  int64_t end_offset_ = 0;              // flat offset just past this chunk's last parameter
  std::unique_ptr<Norm> final_norm_;
  Parameter* output_layer_ = nullptr;  // null when tied to the word embeddings
};

}  // namespace tessera::model
