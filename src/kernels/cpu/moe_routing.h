// The CPU implementation of kernels/moe_routing.h, over host buffers: what the tensor-level entry points
// call once the tensors' device and sizes are checked, and what the kernel tests exercise directly.
// Mixture-of-experts routing: Megatron-Core's top-k router, its load-balancing and z-losses with their
// gradients, capacity-limited token dropping and the row gathers between tokens and experts. Logits are
// [tokens, experts] fp32, row-major; every result is independent of the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/dropout.h"      // DropoutRegion
#include "kernels/moe_routing.h"  // TopkRouterOptions, RouterScoreFunction, TokenDropPolicy

namespace tessera::kernels::cpu {

// indices [tokens, k] and probs [tokens, k] of each token's top-k experts (kernels/moe_routing.h);
// expert_bias [experts] or null.
void topk_router_forward(const float* logits, int64_t tokens, int64_t experts, const TopkRouterOptions& opt,
                         const float* expert_bias, int32_t* indices, float* probs);
// dlogits [tokens, experts] += d(probs)/d(logits)^T dprobs.
void topk_router_backward(const float* logits, const int32_t* indices, const float* dprobs, int64_t tokens,
                          int64_t experts, const TopkRouterOptions& opt, float* dlogits);

// counts [groups, experts] (overwritten): tokens of each group (row t is in group t % groups) whose
// top-k of the aux-loss scores holds each expert.
void aux_loss_counts(const float* logits, int64_t tokens, int64_t experts, int64_t topk, RouterScoreFunction score,
                     int64_t groups, float* counts);
// This rank's share of the load-balancing loss with counts [groups, experts] summed over the ranks.
double aux_loss_forward(const float* logits, const float* counts, int64_t tokens, int64_t experts, int64_t groups,
                        int64_t topk, RouterScoreFunction score, int64_t tokens_per_group, float coeff);
// Its two halves: the per-token terms' sum, added in token order (sum_t sum_i p_ti n_{g(t) i}), and the
// loss from that sum. aux_loss_forward is aux_loss_value(aux_loss_term_sum(...)), so a sum kept on a GPU
// (kernels::aux_loss_sum_into) and finished on the host later gives its bits.
double aux_loss_term_sum(const float* logits, const float* counts, int64_t tokens, int64_t experts, int64_t groups,
                         RouterScoreFunction score);
double aux_loss_value(double term_sum, int64_t experts, int64_t groups, int64_t topk, int64_t tokens_per_group,
                      float coeff);
// dlogits += dloss * d(aux_loss_forward)/d(logits).
void aux_loss_backward(const float* logits, const float* counts, int64_t tokens, int64_t experts, int64_t groups,
                       int64_t topk, RouterScoreFunction score, int64_t tokens_per_group, float coeff, float dloss,
                       float* dlogits);

// coeff * sum_t logsumexp(logits_t)^2 / total_tokens, and its gradient added into dlogits.
double z_loss_forward(const float* logits, int64_t tokens, int64_t experts, float coeff, int64_t total_tokens);
// Its halves, as the aux loss's: sum_t logsumexp(logits_t)^2 in token order, and the loss from that sum.
double z_loss_term_sum(const float* logits, int64_t tokens, int64_t experts);
double z_loss_value(double term_sum, float coeff, int64_t total_tokens);
void z_loss_backward(const float* logits, int64_t tokens, int64_t experts, float coeff, int64_t total_tokens,
                     float dloss, float* dlogits);

// The rows of kernels::ExpertRows on the host.
struct ExpertRowList {
  std::vector<int64_t> counts;  // [experts]
  std::vector<int64_t> routed;  // [experts]: routing entries before the capacity
  std::vector<int32_t> token, slot;
  std::vector<float> prob;
};
ExpertRowList expert_rows(const int32_t* indices, const float* probs, int64_t tokens, int64_t topk, int64_t experts,
                          int64_t capacity, TokenDropPolicy policy, bool pad);

// out[r] = x[token[r]]; x [tokens, hidden], out [rows, hidden].
void gather_token_rows(const float* x, const int32_t* token, float* out, int64_t rows, int64_t hidden, int64_t tokens);
// y[token[r]] += weight[r] * src[r] (weight null: 1); src [rows, hidden], y [tokens, hidden]. Each token
// receives its rows in ascending r, whatever the thread count.
void scatter_add_token_rows(const float* src, const int32_t* token, const float* weight, float* y, int64_t rows,
                            int64_t hidden, int64_t tokens);
// dweight[r] = dot(dy[token[r]], src[r]).
void token_row_dots(const float* dy, const int32_t* token, const float* src, float* dweight, int64_t rows,
                    int64_t hidden, int64_t tokens);

// The rules and scales the CPU kernels apply, shared with the GPU's entry points (kernels/moe_routing.cc)
// so that both refuse the same input with the same message and scale the gradients by the same float.
void check_router_options(const char* kernel, const TopkRouterOptions& opt, int64_t experts, bool expert_bias);
void check_groups(const char* kernel, int64_t tokens, int64_t experts, int64_t groups, int64_t topk);
void check_aux(const char* kernel, int64_t tokens, int64_t experts, int64_t groups, int64_t topk,
               int64_t tokens_per_group);
void check_z_loss(const char* kernel, int64_t tokens, int64_t experts, int64_t total_tokens);
// E / (k G tokens_per_group^2): the aux loss per unit of sum_g sum_i P_gi n_gi.
double aux_scale(int64_t experts, int64_t groups, int64_t topk, int64_t tokens_per_group);
// The aux loss's dL/dp_ti per count, coeff * dloss * aux_scale, and the z-loss's coeff * dloss / tokens.
float aux_gradient_scale(int64_t experts, int64_t groups, int64_t topk, int64_t tokens_per_group, float coeff,
                         float dloss);
float z_loss_gradient_scale(float coeff, int64_t total_tokens, float dloss);
void check_jitter(float eps, const DropoutRegion& r);

// y = x * U(1 - eps, 1 + eps), the uniform dropout's for the element's global index. y may alias x.
void jitter_multiply(const float* x, float* y, float eps, uint64_t seed, uint64_t stream, const DropoutRegion& r);

}  // namespace tessera::kernels::cpu
