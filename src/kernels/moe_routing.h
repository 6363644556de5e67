// Mixture-of-experts routing on tensors (Megatron-Core's TopKRouter and moe_utils): top-k selection
// with a score function, the load-balancing and z-losses with their gradients, capacity-limited token
// dropping, and the row gathers and scatters that carry tokens to their experts and back. Rows of
// logits and activations are the layer's local tokens in [seq, batch] order (row t is (t / B, t % B)).
// Dispatched on the tensors' device (kernels/device_dispatch.h; the CPU code is kernels/cpu/moe_routing.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tessera::kernels {

enum class RouterScoreFunction { Softmax, Sigmoid };  // --moe-router-score-function
enum class TokenDropPolicy { Probs, Position };       // --moe-token-drop-policy

struct TopkRouterOptions {
  int64_t topk = 2;                                  // --moe-router-topk
  RouterScoreFunction score = RouterScoreFunction::Softmax;
  bool pre_softmax = false;                          // --moe-router-pre-softmax
  float scaling_factor = 1.0f;                       // --moe-router-topk-scaling-factor (1: unset)
  // Group-limited routing (--moe-router-num-groups, --moe-router-group-topk; 0: off): each token
  // chooses its k experts only within the group_topk groups of highest score (math::group_limited_topk).
  int64_t num_groups = 0, group_topk = 0;
  bool grouped() const { return group_topk > 0; }
};

// logits [T, E] -> indices int32 [T, k] (experts by descending selection score, ties to the lower
// expert) and probs fp32 [T, k]:
//   softmax, !pre_softmax: top-k of the logits, then a softmax over the k chosen logits;
//   softmax, pre_softmax:  softmax over all E, then top-k (not renormalised);
//   sigmoid:               top-k of sigmoid(logits), divided by their sum + 1e-20 (as Megatron) if k > 1;
// each then times scaling_factor. The top-k is over the selection scores (the logits, the softmax or
// the sigmoids), group-limited when opt.grouped(). expert_bias fp32 [E] (undefined: none; sigmoid only,
// as Megatron's aux-loss-free balancing) is added to the sigmoids for the selection alone: the probs are
// the unbiased sigmoids of the chosen experts, so they and their gradient do not depend on it.
void topk_router_forward(const Tensor& logits, const TopkRouterOptions& opt, const Tensor& expert_bias,
                         const Tensor& indices_out, const Tensor& probs_out);
// Adds d(probs)/d(logits)^T dprobs into dlogits [T, E] (dprobs [T, k]), the chosen experts held fixed.
void topk_router_backward(const Tensor& logits, const Tensor& indices, const Tensor& dprobs,
                          const TopkRouterOptions& opt, const Tensor& dlogits);

// The load-balancing loss's routing map (Megatron's compute_routing_scores_for_aux_loss): scores
// p = softmax(logits) over all E (sigmoid: sigmoid(logits) divided by its row sum + 1e-20, as
// Megatron), each token's top-k of p. counts_out fp32 [groups, E]: tokens of each group routed to each
// expert, row t being in group t % groups (groups = 1: aux_loss; groups = batch: seq_aux_loss, one
// group per sequence). The caller sums the counts over the ranks that hold the rest of the groups'
// tokens (the tensor group under sequence parallelism; Megatron's TP x CP group) before the loss.
void aux_loss_counts(const Tensor& logits, int64_t topk, RouterScoreFunction score, int64_t groups,
                     const Tensor& counts_out);
// This rank's share of the load-balancing loss (Megatron's switch_load_balancing_loss_func, and its
// per-sequence form averaged over the sequences):
//   coeff * E / (k * G) * sum_g sum_i (sum_{local t in g} p_ti) * n_gi / tokens_per_group^2
// with n = counts [G, E] summed over every rank of the groups and tokens_per_group the tokens of one
// group on all those ranks. The ranks' shares add up to the loss of the whole groups. G = 1 is
// aux_loss (tokens_per_group = the local T times |TP x CP|). G = batch is seq_aux_loss exactly as Megatron's
// TopKRouter._apply_seq_aux_loss: the scores reshaped [s, b * E] so each (sequence, expert) is a column,
// their counts summed over TP x CP, the switch loss of that with E experts and s * |TP x CP| tokens,
// divided by b; i.e. the switch loss of each sequence, averaged over the b sequences
// (tokens_per_group = s * |TP x CP|).
double aux_loss_forward(const Tensor& logits, const Tensor& counts, int64_t topk, RouterScoreFunction score,
                        int64_t tokens_per_group, float coeff);
// aux_loss_forward in two halves, for a caller that keeps the sums on the device (the trainer's step:
// model/language_model.h LossSums): the per-token terms' sum in token order written to `out` (a double
// in an int64 [1] tensor on the logits' device, e.g. a slot of kernels::loss_totals; nothing is copied
// back), and aux_loss_value of that sum once the host has read it. aux_loss_forward is
// aux_loss_value(that sum, ...) on either device, so the result is the same bits.
void aux_loss_term_sum_to(const Tensor& logits, const Tensor& counts, int64_t topk, RouterScoreFunction score,
                          int64_t tokens_per_group, const Tensor& out);
double aux_loss_value(double term_sum, int64_t experts, int64_t groups, int64_t topk, int64_t tokens_per_group,
                      float coeff);
// Adds dloss * d(aux_loss_forward)/d(logits) into dlogits (the counts are constants).
void aux_loss_backward(const Tensor& logits, const Tensor& counts, int64_t topk, RouterScoreFunction score,
                       int64_t tokens_per_group, float coeff, float dloss, const Tensor& dlogits);

// This rank's share of the z-loss, coeff * sum_{local t} logsumexp(logits_t)^2 / total_tokens (total
// over the ranks whose shares are added: Megatron's mean over tokens divided by the tensor group).
double z_loss_forward(const Tensor& logits, float coeff, int64_t total_tokens);
// Its halves, as the aux loss's: sum_t logsumexp(logits_t)^2 in token order to `out`, and the loss.
void z_loss_term_sum_to(const Tensor& logits, const Tensor& out);
double z_loss_value(double term_sum, float coeff, int64_t total_tokens);
void z_loss_backward(const Tensor& logits, float coeff, int64_t total_tokens, float dloss, const Tensor& dlogits);

// Megatron's get_capacity: ceil(tokens * topk / experts * factor).
int64_t expert_capacity(int64_t tokens, int64_t topk, int64_t experts, double factor);

// The rows the experts receive, expert-major (expert 0's rows first), tokens ascending within an expert.
struct ExpertRows {
  std::vector<int64_t> counts;  // [E]: rows of each expert
  std::vector<int64_t> routed;  // [E]: routing entries of each expert before the capacity (kept or dropped)
  Tensor token;                 // int32 [R]: the token (row of the layer's input) of each row
  Tensor slot;                  // int32 [R]: t * k + j of the routing entry (indices/probs) it is, -1 for padding
  Tensor prob;                  // fp32 [R]: probs[t, j], 0 for padding
};
// From indices/probs [T, k] over `experts` experts. capacity < 0: dropless (every routing entry is a
// row). Otherwise each expert keeps at most `capacity` of its entries: those of highest prob (Probs)
// or of lowest token (Position), ties to the lower token; dropped entries are no row. pad: each expert
// then has exactly min(capacity, T) rows (capacity > T drops nothing and pads every expert to all T
// tokens, as Megatron's capacity mask), filled with tokens not routed to it (lowest first, prob 0,
// slot -1) as Megatron's --moe-pad-expert-input-to-capacity.
ExpertRows expert_rows(const Tensor& indices, const Tensor& probs, int64_t experts, int64_t capacity,
                       TokenDropPolicy policy, bool pad);

// out[r] = x[token[r]] (x [T, h], out [R, h]).
void gather_token_rows(const Tensor& x, const Tensor& token, const Tensor& out);
// y[token[r]] += weight[r] * rows[r] (weight undefined: 1); rows [R, h], y [T, h].
void scatter_add_token_rows(const Tensor& rows, const Tensor& token, const Tensor& weight, const Tensor& y);
// dweight_out[r] = dot(dy[token[r]], rows[r]): the gradient of scatter_add_token_rows's weights.
void token_row_dots(const Tensor& dy, const Tensor& token, const Tensor& rows, const Tensor& dweight_out);

// Router input jitter (--moe-input-jitter-eps): y = x * U(1 - eps, 1 + eps), the uniform from Philox
// keyed by (seed, stream, global index) exactly as dropout's (kernels/dropout.h DropoutRegion), so it
// is the same under any layout. y may be x.
struct DropoutRegion;
void jitter_multiply(const Tensor& x, const Tensor& y, float eps, uint64_t seed, uint64_t stream,
                     const DropoutRegion& region);

}  // namespace tessera::kernels
