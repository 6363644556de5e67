// The CUDA implementation of kernels/moe_routing.h over device pointers (kernels/cuda/moe_routing.cu).
// The per-token work runs one token per thread through the CPU's own row functions
// (kernels/math/moe_router_rows.h), both compiled without FMA contraction, so indices, probabilities and
// gradients are the CPU's bit for bit (the z-loss's logf excepted: CUDA's and glibc's may differ by an
// ulp). Sums over tokens are formed per token on the GPU and added on the host in token order, as the
// CPU adds them. Scatters give each token its rows in ascending row order. The arguments are checked by
// the entry points (kernels/moe_routing.cc) first. Declared in every build, defined only in a CUDA one.
#pragma once

#include <cstdint>

#include "kernels/dropout.h"      // DropoutRegion
#include "kernels/moe_routing.h"  // TopkRouterOptions, RouterScoreFunction

namespace tessera::kernels::cuda {

// Scratch sizes (floats and int32s per token) topk_router_forward's caller allocates.
int64_t router_float_scratch(int64_t experts, const TopkRouterOptions& opt);
int64_t router_int_scratch(const TopkRouterOptions& opt);

void topk_router_forward(const float* logits, int64_t tokens, int64_t experts, const TopkRouterOptions& opt,
                         const float* expert_bias, int32_t* indices, float* probs, float* fscratch,
                         int32_t* iscratch);
// fscratch: tokens * (2 * experts + 2 * topk) floats.
void topk_router_backward(const float* logits, const int32_t* indices, const float* dprobs, int64_t tokens,
                          int64_t experts, const TopkRouterOptions& opt, float* dlogits, float* fscratch);

// fscratch: tokens * (experts + topk) floats; top: tokens * topk int32s.
void aux_loss_counts(const float* logits, int64_t tokens, int64_t experts, int64_t topk, RouterScoreFunction score,
                     int64_t groups, float* counts, float* fscratch, int32_t* top);
// per_token [tokens] doubles on the device, filled with each token's sum_i p_ti n_i; the caller sums them.
void aux_loss_terms(const float* logits, const float* counts, int64_t tokens, int64_t experts, int64_t groups,
                    RouterScoreFunction score, double* per_token, float* fscratch);
// c: cpu::aux_gradient_scale's. fscratch: tokens * experts floats.
void aux_loss_backward(const float* logits, const float* counts, int64_t tokens, int64_t experts, int64_t groups,
                       RouterScoreFunction score, float c, float* dlogits, float* fscratch);

// per_token [tokens] doubles: lse(logits_t)^2.
void z_loss_terms(const float* logits, int64_t tokens, int64_t experts, double* per_token);
// *out = per_token[0] + per_token[1] + ... in token order, in double, from 0: the host's sum of the
// terms, bit for bit, without copying them back (one block; one thread adds, from shared memory).
void sum_terms_to(const double* per_token, int64_t tokens, double* out);
// c: cpu::z_loss_gradient_scale's.
void z_loss_backward(const float* logits, int64_t tokens, int64_t experts, float c, float* dlogits);

// out[r] = x[token[r]] (x [tokens, hidden], out [rows, hidden]).
void gather_token_rows(const float* x, const int32_t* token, float* out, int64_t rows, int64_t hidden);
// y[token[r]] += weight[r] * src[r] (weight null: 1), each token's rows added in ascending r. Scratch:
// begin [tokens + 1], next [tokens] and order [rows] int32s.
void scatter_add_token_rows(const float* src, const int32_t* token, const float* weight, float* y, int64_t rows,
                            int64_t hidden, int64_t tokens, int32_t* begin, int32_t* next, int32_t* order);
// dweight[r] = dot(dy[token[r]], src[r]), in double, in column order.
void token_row_dots(const float* dy, const int32_t* token, const float* src, float* dweight, int64_t rows,
                    int64_t hidden);

// y = x * U(1 - eps, 1 + eps) from the Philox words dropout draws for the same elements. y may be x.
void jitter_multiply(const float* x, float* y, float eps, uint64_t seed, uint64_t stream, const DropoutRegion& r);


}  // namespace tessera::kernels::cuda
