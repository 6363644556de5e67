// What every model does first with a MicroBatch: its shape checked, its [batch, seq] tensors turned into
// the activations' [seq, batch] order, its ids checked against their range, and on a later pipeline
// chunk the previous chunk's activation checked.
#pragma once

#include <cstdint>

#include "model/language_model.h"

namespace tessera::model {

// [batch, seq] -> [seq, batch] (row t = s * batch + b).
Tensor to_seq_major(const Tensor& t);
// Throws "<what> id X is outside <range> [0, limit)" for the first id outside it.
void check_ids(const Tensor& ids, int64_t limit, const char* what, const char* range = "the vocabulary");
// Throws "<model>::forward: tokens ... do not match [batch, seq]" unless batch.tokens is [ctx.batch, ctx.seq].
void check_batch_shape(const MicroBatch& batch, const ForwardContext& ctx, const char* model);
// The batch's positions in [seq, batch] order: batch.positions, or 0 .. seq-1 for every sample.
Tensor seq_major_positions(const MicroBatch& batch, const ForwardContext& ctx);
// A later chunk's input: the previous chunk's activation, [T (/tp under sequence parallelism), hidden].
const Tensor& checked_chunk_input(const Tensor& input, const ForwardContext& ctx, int64_t hidden,
                                  const parallel::TensorParallelContext& tp, const char* model);

}  // namespace tessera::model
