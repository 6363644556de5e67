#include "model/sliced_multi_token_prediction.h"

#include "model/batch_layout.h"
#include "parallel/tensor_parallel.h"

namespace tessera::model {
namespace {

// The context of the modules' run over the whole sequence: the slice's, as if unsliced.
ForwardContext whole_sequence(const ForwardContext& ctx) {
  ForwardContext whole = ctx;
  whole.seq = ctx.token_slice->total;
  whole.token_slice = nullptr;
  return whole;
}

// The micro-batch's record of the modules, made by slice 0's forward.
SlicedMtpRecord& record_of(const TokenSlice& slice, const char* pass) {
  TESSERA_CHECK(slice.sequence != nullptr, "multi-token prediction under --pipeline-token-slices: the ", pass,
                " of the slice at position ", slice.offset, " has no record for the whole sequence");
  auto* rec = dynamic_cast<SlicedMtpRecord*>(slice.sequence->get());
  TESSERA_CHECK(rec != nullptr, "multi-token prediction under --pipeline-token-slices: the ", pass,
                " of the slice at position ", slice.offset, " before slice 0's forward");
  return *rec;
}

// Rows [first, first + rows) of this rank's view of slice j: all its rows, or under sequence parallelism
// this rank's shard of them ([seq, batch] rows are position-major, so each is a block of rows).
struct RowBlock {
  int64_t first, rows;
};
RowBlock slice_rows(const SlicedMtpRecord& rec, size_t j, int64_t batch, const parallel::TensorParallelContext& tp) {
  const int64_t first = rec.offsets[j] * batch, rows = rec.lengths[j] * batch;
  if (!tp.sequence_parallel) return {first, rows};
  return {first + tp.rank() * (rows / tp.size()), rows / tp.size()};
}

// The whole sequence's h0 as the unsliced modules read it: the slices' parts in sequence order, or under
// sequence parallelism this rank's shard of the whole sequence (each slice's shards gathered first).
Tensor whole_h0(const SlicedMtpRecord& rec, int64_t total, int64_t batch, const parallel::TensorParallelContext& tp) {
  const Tensor& first = rec.h0_parts.front();
  Tensor full = Tensor::empty({total * batch, first.dim(1)}, first.dtype(), first.device());
  for (size_t j = 0; j < rec.h0_parts.size(); ++j) {
    const Tensor rows = tp.sequence_parallel ? parallel::gather_rows(rec.h0_parts[j], *tp.group) : rec.h0_parts[j];
    full.narrow(rec.offsets[j] * batch, rec.lengths[j] * batch).copy_from(rows);
  }
  if (!tp.sequence_parallel) return full;
  const int64_t local = total * batch / tp.size();
  return full.narrow(tp.rank() * local, local).clone();
}

}  // namespace

int64_t SlicedMtpRecord::bytes() const {
  int64_t total = mtp.bytes();  // h0_parts: the slices' head records hold them
  for (const Tensor* t : {&h0, &positions})
    if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  for (const Tensor& t : dh0_parts) total += static_cast<int64_t>(t.nbytes());
  return total;
}

void sliced_mtp_forward(const MultiTokenPrediction& mtp, const Tensor& h0, const ForwardContext& ctx,
                        const parallel::TensorParallelContext& tp, LossSums& losses) {
  TESSERA_CHECK(ctx.token_slice != nullptr, "sliced_mtp_forward outside a token slice");
  const TokenSlice& slice = *ctx.token_slice;
  TESSERA_CHECK(slice.sequence != nullptr && slice.batch != nullptr, "multi-token prediction under "
                "--pipeline-token-slices: the slice at position ", slice.offset, " carries no whole micro-batch");
  if (slice.offset == 0) *slice.sequence = std::make_unique<SlicedMtpRecord>();
  SlicedMtpRecord& rec = record_of(slice, "forward");
  TESSERA_CHECK(rec.offsets.empty() ? slice.offset == 0 : rec.offsets.back() + rec.lengths.back() == slice.offset,
                "multi-token prediction under --pipeline-token-slices: the slice at position ", slice.offset,
                " out of order");
  rec.h0_parts.push_back(h0);
  rec.offsets.push_back(slice.offset);
  rec.lengths.push_back(ctx.seq);
  if (!slice.last(ctx.seq)) return;

  const ForwardContext whole = whole_sequence(ctx);
  const MicroBatch& batch = *slice.batch;
  rec.h0 = whole_h0(rec, whole.seq, whole.batch, tp);
  rec.h0_parts.clear();
  rec.positions = seq_major_positions(batch, whole);
  mtp.forward(rec.h0, to_seq_major(batch.tokens), to_seq_major(batch.labels), to_seq_major(batch.loss_mask),
              rec.positions, whole, rec.mtp, losses);
}

Tensor sliced_mtp_backward(const MultiTokenPrediction& mtp, const ForwardContext& ctx,
                           const parallel::TensorParallelContext& tp, float grad_scale) {
  TESSERA_CHECK(ctx.token_slice != nullptr, "sliced_mtp_backward outside a token slice");
  const TokenSlice& slice = *ctx.token_slice;
  SlicedMtpRecord& rec = record_of(slice, "backward");
  if (slice.last(ctx.seq)) {  // the first backward: the modules', over the whole sequence
    TESSERA_CHECK(rec.h0.defined() && rec.dh0_parts.empty(), "multi-token prediction under "
                  "--pipeline-token-slices: the last slice's backward before its forward, or twice");
    const ForwardContext whole = whole_sequence(ctx);
    const Tensor dh0 = mtp.backward(rec.mtp, rec.positions, whole, grad_scale);
    rec.h0 = rec.positions = Tensor();
    const Tensor full = tp.sequence_parallel ? parallel::gather_rows(dh0, *tp.group) : dh0;
    for (size_t j = 0; j < rec.offsets.size(); ++j) {  // copies, so that each slice's part goes with it
      const RowBlock b = slice_rows(rec, j, whole.batch, tp);
      rec.dh0_parts.push_back(full.narrow(b.first, b.rows).clone());
    }
  }
  TESSERA_CHECK(!rec.dh0_parts.empty() && rec.offsets.back() == slice.offset, "multi-token prediction under "
                "--pipeline-token-slices: the backward of the slice at position ", slice.offset,
                " out of order (the slices run backward in reverse, the last first)");
  Tensor part = std::move(rec.dh0_parts.back());
  rec.dh0_parts.pop_back();
  rec.offsets.pop_back();
  rec.lengths.pop_back();
  return part;
}

}  // namespace tessera::model
