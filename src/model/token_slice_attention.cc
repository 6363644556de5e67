#include "model/token_slice_attention.h"

#include "kernels/elementwise.h"
#include "model/token_sliced_chunk.h"

namespace tessera::model {
namespace {

// The slice's queries are the last seq of the offset + seq cached positions; the masks are the sequence's.
void to_slice(const TokenSlice& slice, kernels::AttentionShape& shape, kernels::AttentionDropout& dropout) {
  TESSERA_CHECK(shape.causal, "token slices need causal attention");
  shape.kv_seq = slice.offset + shape.seq;
  dropout.seq = slice.total;
}

}  // namespace

void token_slice_attention_forward(const ForwardContext& ctx, int64_t layer_number, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const Tensor& attn, const Tensor& lse,
                                   kernels::AttentionShape shape, float scale, kernels::AttentionDropout dropout) {
  const TokenSlice& slice = *ctx.token_slice;
  SliceKvCache& cache = slice.cache(layer_number);
  const int64_t b = ctx.batch;
  if (!cache.k.defined()) {  // the first slice: the whole sequence's cache (TeraPipe preallocates it)
    TESSERA_CHECK(slice.offset == 0, "token slice at ", slice.offset, " before the slice at 0");
    cache.k = Tensor::empty({slice.total * b, k.dim(1), k.dim(2)}, k.dtype(), k.device());
    cache.v = Tensor::empty({slice.total * b, v.dim(1), v.dim(2)}, v.dtype(), v.device());
  }
  cache.k.narrow(slice.offset * b, ctx.seq * b).copy_from(k);
  cache.v.narrow(slice.offset * b, ctx.seq * b).copy_from(v);
  to_slice(slice, shape, dropout);
  const int64_t keys = (slice.offset + ctx.seq) * b;
  kernels::attention_forward(q, cache.k.narrow(0, keys), cache.v.narrow(0, keys), attn, lse, Tensor(), shape, scale,
                             dropout);
}

void token_slice_attention_backward(const ForwardContext& ctx, int64_t layer_number, const Tensor& q,
                                    const Tensor& attn, const Tensor& lse, const Tensor& dattn, const Tensor& dq,
                                    Tensor& dk, Tensor& dv, kernels::AttentionShape shape, float scale,
                                    kernels::AttentionDropout dropout) {
  const TokenSlice& slice = *ctx.token_slice;
  SliceKvCache& cache = slice.cache(layer_number);
  const int64_t b = ctx.batch, keys = (slice.offset + ctx.seq) * b;
  TESSERA_CHECK(cache.k.defined(), "token-sliced backward without the forward's cache");
  if (!cache.dk.defined()) {  // the last slice, first in backward
    cache.dk = Tensor::zeros(cache.k.shape(), DType::F32, cache.k.device());
    cache.dv = Tensor::zeros(cache.v.shape(), DType::F32, cache.v.device());
  }
  to_slice(slice, shape, dropout);
  Tensor dk_all = Tensor::empty({keys, cache.k.dim(1), cache.k.dim(2)}, DType::F32, cache.k.device());
  Tensor dv_all = Tensor::empty({keys, cache.v.dim(1), cache.v.dim(2)}, DType::F32, cache.v.device());
  kernels::attention_backward(q, cache.k.narrow(0, keys), cache.v.narrow(0, keys), attn, lse, dattn, dq, dk_all,
                              dv_all, Tensor(), shape, scale, dropout);
  // Gradients for the earlier slices' keys and values wait in the cache; the later slices' for this
  // slice's own positions are there already, and join this slice's.
  kernels::add_into(cache.dk.narrow(0, keys), dk_all);
  kernels::add_into(cache.dv.narrow(0, keys), dv_all);
  dk = cache.dk.narrow(slice.offset * b, ctx.seq * b);
  dv = cache.dv.narrow(slice.offset * b, ctx.seq * b);
}

}  // namespace tessera::model
