// A token slice's attention against its layer's key/value cache (model/token_sliced_chunk.h), for every
// attention that becomes ordinary causal attention once its keys and values are formed: SelfAttention's
// (keys and values of its query groups) and Multi-Latent Attention's (each head's up-projected key
// [no-RoPE | RoPE] and value, zero-padded to one width). The cache holds whatever k and v the caller gives,
// at the slice's global positions, so a later slice's queries attend to the earlier slices' keys.
#pragma once

#include <cstdint>

#include "kernels/attention.h"
#include "model/language_model.h"

namespace tessera::model {

// shape: the slice's own attention shape (seq = the slice's length, causal); the keys are then the cache's
// positions [0, offset + seq). dropout: keyed as for the whole sequence (its seq is set to the sequence's).
// k and v ([slice rows, kv heads, d]) go into ctx.token_slice's cache of layer `layer_number`, which the
// slice at offset 0 allocates at full length.
void token_slice_attention_forward(const ForwardContext& ctx, int64_t layer_number, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const Tensor& attn, const Tensor& lse,
                                   kernels::AttentionShape shape, float scale, kernels::AttentionDropout dropout);

// Backward, slices in reverse: the gradients this slice's queries give to earlier positions' keys and values
// wait in the cache; dk and dv come back as views of the cache's gradients at this slice's positions (the
// later slices' contributions included), which the caller may overwrite.
void token_slice_attention_backward(const ForwardContext& ctx, int64_t layer_number, const Tensor& q,
                                    const Tensor& attn, const Tensor& lse, const Tensor& dattn, const Tensor& dq,
                                    Tensor& dk, Tensor& dv, kernels::AttentionShape shape, float scale,
                                    kernels::AttentionDropout dropout);

}  // namespace tessera::model
