#include "model/modules.h"

#include "model/weight_gradient_store.h"

#include <algorithm>

#include "core/philox.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "kernels/packed_linear.h"
#include "kernels/norms.h"
#include "kernels/precision.h"
#include "model/token_sliced_chunk.h"

namespace tessera::model {

uint64_t dropout_stream(int64_t iteration, int64_t layer_number, int site) {
  return mix_stream(mix_stream(static_cast<uint64_t>(iteration), static_cast<uint64_t>(layer_number)),
                    static_cast<uint64_t>(site));
}

namespace {

// The spec of a weight (or bias) of shape view + [in] split along view[split_dim] over the tensor group.
ParameterSpec split_spec(const std::string& name, Shape view, int split_dim, int64_t in, Init init, float std,
                         bool decay, const parallel::TensorParallelContext& tp) {
  TESSERA_CHECK(view[split_dim] % tp.size() == 0, name, ": dimension ", view[split_dim], " does not split over ",
                tp.size(), " tensor-parallel ranks");
  int64_t full_rows = shape_numel(view);
  int64_t length = view[split_dim] / tp.size();
  if (in > 0) view.push_back(in);
  ParameterSpec spec{name, {}, init, std, decay};
  spec.sharding = {in > 0 ? Shape{full_rows, in} : Shape{full_rows}, view, split_dim, tp.rank() * length, length};
  int64_t local_rows = full_rows / tp.size();
  spec.shape = in > 0 ? Shape{local_rows, in} : Shape{local_rows};
  if (tp.size() == 1) spec.sharding = {};
  return spec;
}

}  // namespace

GemmWeight gemm_weight(const ParameterSet& params, const Parameter& weight, DType input_type) {
  Tensor rounded = params.rounded_value(weight, input_type);
  if (rounded.defined()) return {rounded, true};
  return {weight.value, false};
}

bool make_gemm_input(DType params_dtype, Tensor& x) {
  const DType buffer = kernels::gemm_buffer_type(kernels::gemm_rounding(params_dtype), x.device());
  if (buffer == DType::F32) return kernels::round_in_place_for_gemm(params_dtype, x);
  x = kernels::store_as(buffer, x);
  return true;
}

void linear_forward(const ParameterSet& params, const Parameter& weight, const Tensor& x, const Tensor& b,
                    const Tensor& y, DType input_type, bool x_rounded) {
  const int64_t rows = x.numel() / weight.value.dim(1);
  if (input_type == DType::F32 && rows <= kernels::kPackedLinearMaxRows) {
    const Tensor packed = params.packed_value(weight);
    if (packed.defined()) return kernels::packed_linear_forward(x, packed, b, y);
  }
  const GemmWeight w = gemm_weight(params, weight, input_type);
  kernels::linear_forward(x, w.values, b, y, input_type, x_rounded, w.rounded);
}

ColumnParallelLinear::ColumnParallelLinear(ParameterSet& params, const std::string& prefix, int64_t in,
                                           const Shape& out_view, int split_dim, bool bias, float init_std,
                                           const parallel::TensorParallelContext& tp, DType gemm_input_type,
                                           bool reduce)
    : tp_(tp),
      params_(&params),
      in_(in),
      out_local_(shape_numel(out_view) / tp.size()),
      input_type_(gemm_input_type),
      reduce_(reduce) {
  ParameterSpec w = split_spec(prefix + ".weight", out_view, split_dim, in, Init::Normal, init_std, true, tp);
  w.gemm_weight = true;
  weight_ = params.add(w);
  if (bias) bias_ = params.add(split_spec(prefix + ".bias", out_view, split_dim, 0, Init::Zeros, 0.0f, false, tp));
}

kernels::DropoutRegion residual_region(const ForwardContext& ctx, int64_t hidden,
                                       const parallel::TensorParallelContext& tp) {
  TESSERA_CHECK(ctx.context_parallel == nullptr, "a single dropout region for a context-parallel rank's two chunks "
                "(residual_dropout keys each)");
  // A token slice (ForwardContext::token_slice) is rows [offset, offset + seq) of the whole sequence's.
  const int64_t first = ctx.token_slice ? ctx.token_slice->offset : 0;
  const int64_t total = ctx.token_slice ? ctx.token_slice->total : ctx.seq;
  if (!tp.sequence_parallel) return {ctx.seq, ctx.batch, hidden, first, total, ctx.sample_offset};
  int64_t local = ctx.seq / tp.size();
  return {local, ctx.batch, hidden, first + tp.rank() * local, total, ctx.sample_offset};
}

void for_each_residual_part(const ForwardContext& ctx, int64_t hidden, const parallel::TensorParallelContext& tp,
                            const std::function<void(int64_t, int64_t, const kernels::DropoutRegion&)>& f) {
  if (ctx.context_parallel == nullptr) {
    const kernels::DropoutRegion region = residual_region(ctx, hidden, tp);
    return f(0, region.seq * region.batch, region);
  }
  const parallel::ContextParallelContext& cp = *ctx.context_parallel;
  TESSERA_CHECK(ctx.token_slice == nullptr, "context parallelism with token slices");
  const int64_t chunk = ctx.seq / 2, total = ctx.seq * cp.size();
  const auto chunks = parallel::load_balanced_chunks(cp.size(), cp.rank());
  // Under sequence parallelism x is tensor rank t's rows [t local, (t + 1) local) of the two chunks' 2 chunk
  // rows; each part of it that falls in one chunk is keyed by that chunk's global rows.
  const int64_t local = tp.sequence_parallel ? ctx.seq / tp.size() : ctx.seq;
  const int64_t first = tp.sequence_parallel ? tp.rank() * local : 0;
  for (int c = 0; c < 2; ++c) {
    const int64_t begin = std::max(first, c * chunk), end = std::min(first + local, (c + 1) * chunk);
    if (begin >= end) continue;
    f((begin - first) * ctx.batch, (end - begin) * ctx.batch,
      {end - begin, ctx.batch, hidden, chunks[c] * chunk + (begin - c * chunk), total, ctx.sample_offset});
  }
}

void residual_dropout(const Tensor& x, float p, uint64_t seed, uint64_t stream, const ForwardContext& ctx,
                      int64_t hidden, const parallel::TensorParallelContext& tp, bool backward) {
  for_each_residual_part(ctx, hidden, tp, [&](int64_t row, int64_t rows, const kernels::DropoutRegion& region) {
    const Tensor part = ctx.context_parallel ? x.narrow(row, rows) : x;
    if (backward) kernels::dropout_backward(part, part, p, seed, stream, region);
    else kernels::dropout_forward(part, part, p, seed, stream, region);
  });
}

namespace {

// x gathered over the tensor group under sequence parallelism (else x). ProcessGroup carries fp32, not
// 16-bit tensors, so a 16-bit input (a pre-LN norm's output kept so on a GPU) is widened for the gather,
// exactly, and the GEMM encodes the gathered rows again: the one place such an input is widened.
Tensor gather_input(const Tensor& x, const parallel::TensorParallelContext& tp) {
  const bool gathers = tp.sequence_parallel && tp.size() > 1;
  return parallel::gather_to_tensor_parallel(gathers ? kernels::to_fp32(x) : x, tp);
}

}  // namespace

Tensor ColumnParallelLinear::forward(const Tensor& x, bool x_rounded) const {
  Tensor full = reduce_ ? gather_input(x, tp_) : x;
  int64_t rows = full.numel() / in_;
  Tensor y = Tensor::empty({rows, out_local_});
  linear_forward(*params_, *weight_, full, bias_ ? bias_->value : Tensor(), y, input_type_, x_rounded);
  return y;
}

Tensor ColumnParallelLinear::backward(const Tensor& dy, const Tensor& x, bool x_rounded) const {
  // Under sequence parallelism the gathered input is not kept from forward (that would undo the memory
  // saving); it is gathered again, as Megatron does.
  Tensor full = reduce_ ? gather_input(x, tp_) : x;
  int64_t rows = full.numel() / in_;
  Tensor dx = Tensor::empty({rows, in_});
  GemmWeight w = gemm_weight(*params_, *weight_, input_type_);
  const Tensor dw = weight_->grad, db = bias_ ? bias_->grad : Tensor();
  if (WeightGradientStore* store = deferred_weight_gradients()) {  // zero bubble: dW and db in the W pass
    kernels::linear_backward(dy, full, w.values, dx, Tensor(), Tensor(), input_type_, x_rounded, w.rounded);
    store->defer([=, type = input_type_] {
      kernels::linear_backward(dy, full, w.values, Tensor(), dw, db, type, x_rounded, w.rounded);
    }, {dy, full});
  } else {
    kernels::linear_backward(dy, full, w.values, dx, dw, db, input_type_, x_rounded, w.rounded);
  }
  return reduce_ ? parallel::reduce_to_input(dx, tp_) : dx;
}

RowParallelLinear::RowParallelLinear(ParameterSet& params, const std::string& prefix, int64_t in, int64_t out,
                                     bool bias, float init_std, const parallel::TensorParallelContext& tp,
                                     DType gemm_input_type, bool reduce)
    : tp_(tp), params_(&params), out_(out), input_type_(gemm_input_type), reduce_(reduce) {
  TESSERA_CHECK(in % tp.size() == 0, prefix, ": ", in, " input features do not split over ", tp.size(),
                " tensor-parallel ranks");
  in_local_ = in / tp.size();
  ParameterSpec w{prefix + ".weight", {out, in_local_}, Init::Normal, init_std, true};
  if (tp.size() > 1) w.sharding = {{out, in}, {out, in}, 1, tp.rank() * in_local_, in_local_};
  w.gemm_weight = true;
  weight_ = params.add(w);
  if (bias) bias_ = params.add({prefix + ".bias", {out}, Init::Zeros, 0.0f, false});
}

Tensor RowParallelLinear::forward(const Tensor& x, bool x_rounded) const {
  int64_t rows = x.numel() / in_local_;
  Tensor partial = Tensor::empty({rows, out_});
  linear_forward(*params_, *weight_, x, Tensor(), partial, input_type_, x_rounded);
  if (!reduce_) {
    if (bias_ && tp_.rank() == 0) kernels::add_bias_rows(partial, bias_->value);
    return partial;
  }
  Tensor y = tp_.sequence_parallel ? parallel::reduce_scatter_rows(partial, *tp_.group) : partial;
  if (!tp_.sequence_parallel) parallel::all_reduce_sum(y, *tp_.group);
  if (bias_) kernels::add_bias_rows(y, bias_->value);
  return y;
}

Tensor RowParallelLinear::backward(const Tensor& dy, const Tensor& x, bool x_rounded) const {
  // The bias gradient comes from the gathered (full) dy, so it is complete on every rank.
  Tensor full = reduce_ ? parallel::gather_to_tensor_parallel(dy, tp_) : dy;
  int64_t rows = x.numel() / in_local_;
  Tensor dx = Tensor::empty({rows, in_local_});
  GemmWeight w = gemm_weight(*params_, *weight_, input_type_);
  const Tensor dw = weight_->grad, db = bias_ ? bias_->grad : Tensor();
  if (WeightGradientStore* store = deferred_weight_gradients()) {  // zero bubble: dW and db in the W pass
    kernels::linear_backward(full, x, w.values, dx, Tensor(), Tensor(), input_type_, x_rounded, w.rounded);
    store->defer([=, type = input_type_] {
      kernels::linear_backward(full, x, w.values, Tensor(), dw, db, type, x_rounded, w.rounded);
    }, {full, x});
  } else {
    kernels::linear_backward(full, x, w.values, dx, dw, db, input_type_, x_rounded, w.rounded);
  }
  return dx;
}

Norm::Norm(ParameterSet& params, const std::string& prefix, const ModelConfig& config, bool sequence_parallel,
           int64_t width)
    : kind_(config.normalization), eps_(config.norm_epsilon), hidden_(width > 0 ? width : config.hidden_size) {
  ParameterSpec w{prefix + ".weight", {hidden_}, Init::Ones, 0.0f, false};
  w.sequence_parallel_grad = sequence_parallel;
  weight_ = params.add(w);
  if (kind_ == Normalization::LayerNorm) {
    ParameterSpec b{prefix + ".bias", {hidden_}, Init::Zeros, 0.0f, false};
    b.sequence_parallel_grad = sequence_parallel;
    bias_ = params.add(b);
  }
}

void Norm::forward(const Tensor& x, Tensor& y, Tensor& mean, Tensor& rstd, DType round_output, DType y_type) const {
  int64_t rows = x.numel() / hidden_;
  y = Tensor::empty({rows, hidden_}, y_type);
  rstd = Tensor::empty({rows});
  if (kind_ == Normalization::LayerNorm) {
    mean = Tensor::empty({rows});
    kernels::layernorm_forward(x, weight_->value, bias_->value, y, mean, rstd, eps_, round_output);
  } else {
    kernels::rmsnorm_forward(x, weight_->value, y, rstd, eps_, round_output);
  }
}

void Norm::forward_after_residual(const Tensor& x, const Tensor& residual, Tensor& y, Tensor& mean, Tensor& rstd,
                                  DType round_output, DType y_type) const {
  // Made before y, mean and rstd are assigned: the residual may be what y held (decoding's post-LN norm).
  const int64_t rows = x.numel() / hidden_;
  Tensor out = Tensor::empty({rows, hidden_}, y_type), out_rstd = Tensor::empty({rows}), out_mean;
  if (kind_ == Normalization::LayerNorm) {
    out_mean = Tensor::empty({rows});
    kernels::residual_layernorm_forward(x, residual, weight_->value, bias_->value, out, out_mean, out_rstd, eps_,
                                        round_output);
  } else {
    kernels::residual_rmsnorm_forward(x, residual, weight_->value, out, out_rstd, eps_, round_output);
  }
  y = out, mean = out_mean, rstd = out_rstd;
}

void Norm::backward(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                    const Tensor& dx) const {
  if (kind_ == Normalization::LayerNorm)
    kernels::layernorm_backward(dy, x, weight_->value, mean, rstd, dx, weight_->grad, bias_->grad);
  else
    kernels::rmsnorm_backward(dy, x, weight_->value, rstd, dx, weight_->grad);
}

}  // namespace tessera::model
