#include "model/batch_layout.h"

#include "core/check.h"
#include "kernels/token_layout.h"

namespace tessera::model {

Tensor to_seq_major(const Tensor& t) {
  Tensor out = Tensor::empty({t.dim(1), t.dim(0)}, t.dtype());
  kernels::transpose_rows(t, out);
  return out;
}

void check_ids(const Tensor& ids, int64_t limit, const char* what, const char* range) {
  const kernels::IdOutside bad = kernels::first_id_outside(ids, 0, limit);
  TESSERA_CHECK(bad.index < 0, what, " id ", bad.id, " is outside ", range, " [0, ", limit, ")");
}

void check_batch_shape(const MicroBatch& batch, const ForwardContext& ctx, const char* model) {
  TESSERA_CHECK(batch.tokens.dim(0) == ctx.batch && batch.tokens.dim(1) == ctx.seq, model, "::forward: tokens ",
                shape_str(batch.tokens.shape()), " do not match [batch, seq] = [", ctx.batch, ", ", ctx.seq, "]");
}

Tensor seq_major_positions(const MicroBatch& batch, const ForwardContext& ctx) {
  if (batch.positions.defined()) return to_seq_major(batch.positions);
  Tensor positions = Tensor::empty({ctx.seq, ctx.batch}, DType::I32);
  kernels::fill_positions(positions, ctx.batch);
  return positions;
}

const Tensor& checked_chunk_input(const Tensor& input, const ForwardContext& ctx, int64_t hidden,
                                  const parallel::TensorParallelContext& tp, const char* model) {
  const int64_t rows = ctx.seq * ctx.batch, local_rows = tp.sequence_parallel ? rows / tp.size() : rows;
  TESSERA_CHECK(input.defined() && input.shape() == Shape({local_rows, hidden}), model,
                "::forward: the input activation is ", input.defined() ? shape_str(input.shape()) : "missing",
                ", expected [", local_rows, ", ", hidden, "]");
  return input;
}

}  // namespace tessera::model
