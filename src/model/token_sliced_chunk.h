// TeraPipe's token slicing (Li et al., ICML 2021) inside one pipeline stage: a micro-batch's sequence is
// cut along its tokens into slices l_1..l_n (sum L), and the chunk runs each slice through all of its
// layers before the next. Causal attention at slice i needs the keys and values of the earlier tokens
// only, so each layer keeps, per micro-batch, the keys and values of the whole sequence, preallocated at
// full length (TeraPipe's cache): slice i writes its own at positions [c_i, c_i + l_i), c_i = l_1 + ... +
// l_{i-1}, and attends to positions [0, c_i + l_i) (kernels::AttentionShape::kv_seq). Backward runs the
// slices in reverse: the key and value gradients a slice's attention gives to earlier positions are
// accumulated in the cache, and each slice adds the sum for its own positions into its keys' and
// values' gradient when its turn comes. Everything keyed by position follows global positions: position
// embeddings and rotary embeddings (the slice's MicroBatch carries its global positions), dropout (the
// residual stream's masks through residual_region, attention's through AttentionDropout::seq), and the
// losses (sums over each slice's tokens, which add up to the micro-batch's). So a sliced step gives the
// unsliced step's losses and gradients, up to the order of floating-point sums.
//
// with_token_slices wraps any GPT-style chunk, and the layers' attention reads ForwardContext::token_slice.
// Across pipeline stages the schedule runs the slices one at a time (forward_slice, backward_slice), so
// slice i leaves a stage while the stage works on slice i + 1.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/language_model.h"

namespace tessera::model {

// One layer's cache for one micro-batch: keys and values of the whole sequence (after rotary
// embeddings), [seq * batch, query groups on this rank, head dim] in the activations' [seq, batch] row
// order, allocated by the first slice's forward; and in backward the gradients that later slices' queries
// send to each position's key and value (allocated, zeroed, by the last slice's backward).
struct SliceKvCache {
  Tensor k, v, dk, dv;
  int64_t bytes() const;
};

// What a slice's forward and backward see of the slicing (ForwardContext::token_slice).
struct TokenSlice {
  int64_t offset = 0;  // the slice's first position in the sequence
  int64_t total = 0;   // the whole sequence's length
  std::vector<SliceKvCache>* caches = nullptr;  // one per layer of the model, by global layer number - 1
  SliceKvCache& cache(int64_t layer_number) const;
  // Work over the whole sequence after the slices (multi-token prediction on the last stage,
  // model/sliced_multi_token_prediction.h): the micro-batch whole (forward only; null in backward), and
  // the chunk's own record of that work, which the sliced record owns from slice 0's forward to slice
  // 0's backward and counts in its bytes.
  const MicroBatch* batch = nullptr;
  std::unique_ptr<ChunkRecord>* sequence = nullptr;
  bool last(int64_t length) const { return offset + length == total; }
};

// --pipeline-token-slices for training: a count n (n equal slices; it must divide the sequence) or
// comma-separated positive lengths summing to the sequence. Throws an Error naming the flag and the rule
// (also for "auto", which needs a cost model: train's arguments and the planner resolve it before this).
std::vector<int64_t> parse_token_slice_lengths(const std::string& value, int64_t seq_length);

// Positions [offset, offset + length) of a micro-batch's [batch, seq] tensors (copies), with their global
// positions (batch.positions, or offset ..). A document mask or padding mask is refused.
MicroBatch token_slice_of(const MicroBatch& batch, int64_t offset, int64_t length);

// `chunk` running each micro-batch slice by slice (the lengths sum to the sequence length) with the
// caches above; evaluation, scoring and decoding pass through unsliced. The chunk must be causal; under
// sequence parallelism each slice's length must split over the tensor group. A record's bytes count its
// caches, and the inner chunk's work over the whole sequence (TokenSlice::sequence: multi-token prediction).
//
// forward runs a micro-batch's slices one after another; a pipeline schedule with token slices
// (pipeline/schedules.h, TeraPipe) instead calls forward_slice and backward_slice, one slice at a time,
// with the micro-batch's record (make_record) kept from slice 0's forward to slice 0's backward: forwards
// in slice order, backwards in reverse. Their input and output are the slice's rows only (the rows of
// positions [offset, offset + length), or under sequence parallelism this rank's shard of them), and the
// context is the whole micro-batch's.
class TokenSlicedChunk : public LanguageModelChunk {
 public:
  virtual const std::vector<int64_t>& slice_lengths() const = 0;
  virtual Tensor forward_slice(int slice, const MicroBatch& batch, const Tensor& input, const ForwardContext& context,
                               ChunkRecord& record, LossSums& losses, const ParamHooks& hooks) const = 0;
  // The parameter hooks run on slice 0 only: a gradient is final once the first slice has added to it.
  virtual Tensor backward_slice(int slice, ChunkRecord& record, const Tensor& doutput, const ForwardContext& context,
                                float grad_scale, const ParamHooks& hooks) const = 0;
};

std::unique_ptr<TokenSlicedChunk> with_token_slices(std::unique_ptr<LanguageModelChunk> chunk,
                                                    std::vector<int64_t> slices);

}  // namespace tessera::model
