// Multi-token prediction (model/multi_token_prediction.h) on a chunk run in TeraPipe's token slices
// (model/token_sliced_chunk.h). Each MTP depth rolls the whole sequence left by one position, so a
// slice's predictions need the next slice's tokens and hidden states: the modules cannot run slice by
// slice. Instead the chunk with the head runs its main head slice by slice as before and
//   forward:  each slice hands its final-norm output h0 (the head's rec.final_ln) to this record; after
//             the last slice's head, the modules run once over the whole sequence, exactly as without
//             slices (same rolls, same dropout keys, same loss weights), and add the mtp_k losses once;
//   backward: the last slice runs backward first; it runs the modules' backward, which gives the
//             gradient of the whole sequence's h0, cut here into each slice's part. Each slice's head
//             backward then adds its part to its own final-norm gradient (as the unsliced head adds the
//             whole), and drops it.
// Under sequence parallelism a rank holds its shard of each slice's rows, which is not its shard of the
// whole sequence the modules run on: the slices' h0 are gathered over the tensor group into the whole
// sequence and this rank's shard of that taken, and the gradient goes back the same way.
//
// Memory, beyond what the unsliced run holds: from the last slice's forward to its backward (adjacent on
// a last pipeline stage under 1F1B), a copy of the whole sequence's h0 ([seq x batch (/tp), hidden]; the
// unsliced modules read the head's own) and the whole micro-batch's positions ([seq x batch] int32); from the last slice's backward, the slices' parts of h0's gradient, each freed by its slice's
// backward. The modules' own record (MtpRecord) is what it is without slices. All of it is counted in
// SlicedMtpRecord::bytes, which the sliced chunk's record adds to its own.
#pragma once

#include <vector>

#include "model/multi_token_prediction.h"
#include "model/token_sliced_chunk.h"

namespace tessera::model {

// A micro-batch's multi-token prediction across its slices (the sliced record's TokenSlice::sequence).
struct SlicedMtpRecord final : ChunkRecord {
  std::vector<Tensor> h0_parts;  // each forwarded slice's final-norm output (shared with its head's record)
  std::vector<int64_t> offsets, lengths;  // the slices' positions, in slice order
  Tensor h0, positions;  // the whole sequence's ([seq, batch] layout), from the last slice's forward
  MtpRecord mtp;
  std::vector<Tensor> dh0_parts;  // from the last slice's backward: each slice's part of h0's gradient
  int64_t bytes() const override;
};

// Slice forward on the chunk with the head, after the slice's main head: keeps h0 (the slice's final-norm
// output), and after the last slice runs the modules over the whole sequence (slice.batch, every position
// of it), adding the mtp_k losses to `losses`. ctx: the slice's (seq: the slice's length; the caller has
// checked the slice's token ids).
void sliced_mtp_forward(const MultiTokenPrediction& mtp, const Tensor& h0, const ForwardContext& ctx,
                        const parallel::TensorParallelContext& tp, LossSums& losses);

// Slice backward, before the slice's head: at the last slice runs the modules' backward; returns this
// slice's part of the gradient of h0 (its rows, or under sequence parallelism this rank's shard of them).
Tensor sliced_mtp_backward(const MultiTokenPrediction& mtp, const ForwardContext& ctx,
                           const parallel::TensorParallelContext& tp, float grad_scale);

}  // namespace tessera::model
