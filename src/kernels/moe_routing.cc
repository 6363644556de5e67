#include "kernels/moe_routing.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/moe_routing.h"
#include "kernels/device_dispatch.h"
#include "kernels/dropout.h"

namespace tessera::kernels {
namespace {

// logits [tokens, experts].
void check_logits(const char* kernel, const Tensor& logits) {
  TESSERA_CHECK(logits.ndim() == 2, kernel, ": logits ", shape_str(logits.shape()), " are not [tokens, experts]");
}

// A [rows, hidden] operand (any leading shape) with `hidden` columns.
void check_rows(const char* kernel, const char* what, const Tensor& t, int64_t hidden) {
  TESSERA_CHECK(t.ndim() >= 2 && t.dim(-1) == hidden, kernel, ": ", what, " ", shape_str(t.shape()),
                " is not [rows, ", hidden, "]");
}

// The groups of counts [groups, experts].
int64_t count_groups(const char* kernel, const Tensor& counts, int64_t experts) {
  TESSERA_CHECK(counts.numel() > 0 && counts.numel() % experts == 0, kernel, ": counts ", shape_str(counts.shape()),
                " are not [groups, ", experts, "]");
  return counts.numel() / experts;
}

}  // namespace

void topk_router_forward(const Tensor& logits, const TopkRouterOptions& opt, const Tensor& expert_bias,
                         const Tensor& indices_out, const Tensor& probs_out) {
  const char* kernel = "topk_router_forward";
  kernel_device(kernel, {&logits, &expert_bias, &indices_out, &probs_out});
  check_logits(kernel, logits);
  const int64_t T = logits.dim(0), E = logits.dim(1);
  check_numel(kernel, "indices_out", indices_out, T * opt.topk);
  check_numel(kernel, "probs_out", probs_out, T * opt.topk);
  if (expert_bias.defined()) check_numel(kernel, "expert_bias", expert_bias, E);
  cpu::topk_router_forward(logits.f32(), T, E, opt, f32_or_null(expert_bias), indices_out.i32(), probs_out.f32());
}

void topk_router_backward(const Tensor& logits, const Tensor& indices, const Tensor& dprobs,
                          const TopkRouterOptions& opt, const Tensor& dlogits) {
  const char* kernel = "topk_router_backward";
  kernel_device(kernel, {&logits, &indices, &dprobs, &dlogits});
  check_logits(kernel, logits);
  const int64_t T = logits.dim(0), E = logits.dim(1);
  check_numel(kernel, "indices", indices, T * opt.topk);
  check_numel(kernel, "dprobs", dprobs, T * opt.topk);
  check_numel(kernel, "dlogits", dlogits, T * E);
  cpu::topk_router_backward(logits.f32(), indices.i32(), dprobs.f32(), T, E, opt, dlogits.f32());
}

void aux_loss_counts(const Tensor& logits, int64_t topk, RouterScoreFunction score, int64_t groups,
                     const Tensor& counts_out) {
  const char* kernel = "aux_loss_counts";
  kernel_device(kernel, {&logits, &counts_out});
  check_logits(kernel, logits);
  const int64_t T = logits.dim(0), E = logits.dim(1);
  check_numel(kernel, "counts_out", counts_out, groups * E);
  cpu::aux_loss_counts(logits.f32(), T, E, topk, score, groups, counts_out.f32());
}

double aux_loss_forward(const Tensor& logits, const Tensor& counts, int64_t topk, RouterScoreFunction score,
                        int64_t tokens_per_group, float coeff) {
  const char* kernel = "aux_loss_forward";
  kernel_device(kernel, {&logits, &counts});
  check_logits(kernel, logits);
  const int64_t T = logits.dim(0), E = logits.dim(1);
  const int64_t G = count_groups(kernel, counts, E);
  return cpu::aux_loss_forward(logits.f32(), counts.f32(), T, E, G, topk, score, tokens_per_group, coeff);
}

void aux_loss_backward(const Tensor& logits, const Tensor& counts, int64_t topk, RouterScoreFunction score,
                       int64_t tokens_per_group, float coeff, float dloss, const Tensor& dlogits) {
  const char* kernel = "aux_loss_backward";
  kernel_device(kernel, {&logits, &counts, &dlogits});
  check_logits(kernel, logits);
  const int64_t T = logits.dim(0), E = logits.dim(1);
  const int64_t G = count_groups(kernel, counts, E);
  check_numel(kernel, "dlogits", dlogits, T * E);
  cpu::aux_loss_backward(logits.f32(), counts.f32(), T, E, G, topk, score, tokens_per_group, coeff, dloss,
                         dlogits.f32());
}

double z_loss_forward(const Tensor& logits, float coeff, int64_t total_tokens) {
  const char* kernel = "z_loss_forward";
  kernel_device(kernel, {&logits});
  check_logits(kernel, logits);
  return cpu::z_loss_forward(logits.f32(), logits.dim(0), logits.dim(1), coeff, total_tokens);
}

void z_loss_backward(const Tensor& logits, float coeff, int64_t total_tokens, float dloss, const Tensor& dlogits) {
  const char* kernel = "z_loss_backward";
  kernel_device(kernel, {&logits, &dlogits});
  check_logits(kernel, logits);
  check_numel(kernel, "dlogits", dlogits, logits.numel());
  cpu::z_loss_backward(logits.f32(), logits.dim(0), logits.dim(1), coeff, total_tokens, dloss, dlogits.f32());
}

// Megatron's get_capacity(num_tokens * topk, experts, factor), in the same double arithmetic.
int64_t expert_capacity(int64_t tokens, int64_t topk, int64_t experts, double factor) {
  TESSERA_CHECK(tokens >= 0 && topk >= 1 && experts >= 1 && factor > 0, "expert_capacity: ", tokens, " tokens, top-",
                topk, ", ", experts, " experts, factor ", factor);
  return static_cast<int64_t>(
      std::ceil(static_cast<double>(tokens * topk) / static_cast<double>(experts) * factor));
}

ExpertRows expert_rows(const Tensor& indices, const Tensor& probs, int64_t experts, int64_t capacity,
                       TokenDropPolicy policy, bool pad) {
  const char* kernel = "expert_rows";
  const Device device = kernel_device(kernel, {&indices, &probs});
  TESSERA_CHECK(indices.ndim() == 2, kernel, ": indices ", shape_str(indices.shape()), " are not [tokens, k]");
  const int64_t T = indices.dim(0), k = indices.dim(1);
  check_numel(kernel, "probs", probs, T * k);
  cpu::ExpertRowList list =
      cpu::expert_rows(indices.i32(), probs.f32(), T, k, experts, capacity, policy, pad);
  const int64_t R = static_cast<int64_t>(list.token.size());
  ExpertRows out{std::move(list.counts), std::move(list.routed), Tensor::empty({R}, DType::I32, device), Tensor::empty({R}, DType::I32, device),
                 Tensor::empty({R}, DType::F32, device)};
  if (R > 0) {
    std::memcpy(out.token.raw(), list.token.data(), out.token.nbytes());
    std::memcpy(out.slot.raw(), list.slot.data(), out.slot.nbytes());
    std::memcpy(out.prob.raw(), list.prob.data(), out.prob.nbytes());
  }
  return out;
}

void gather_token_rows(const Tensor& x, const Tensor& token, const Tensor& out) {
  const char* kernel = "gather_token_rows";
  kernel_device(kernel, {&x, &token, &out});
  TESSERA_CHECK(x.ndim() >= 2, kernel, ": x ", shape_str(x.shape()), " is not [tokens, hidden]");
  const int64_t h = x.dim(-1), R = token.numel();
  check_numel(kernel, "out", out, R * h);
  cpu::gather_token_rows(x.f32(), token.i32(), out.f32(), R, h, h > 0 ? x.numel() / h : 0);
}

void scatter_add_token_rows(const Tensor& rows, const Tensor& token, const Tensor& weight, const Tensor& y) {
  const char* kernel = "scatter_add_token_rows";
  kernel_device(kernel, {&rows, &token, &weight, &y});
  TESSERA_CHECK(y.ndim() >= 2, kernel, ": y ", shape_str(y.shape()), " is not [tokens, hidden]");
  const int64_t h = y.dim(-1), R = token.numel();
  check_rows(kernel, "rows", rows, h);
  check_numel(kernel, "rows", rows, R * h);
  if (weight.defined()) check_numel(kernel, "weight", weight, R);
  cpu::scatter_add_token_rows(rows.f32(), token.i32(), f32_or_null(weight), y.f32(), R, h,
                              h > 0 ? y.numel() / h : 0);
}

void token_row_dots(const Tensor& dy, const Tensor& token, const Tensor& rows, const Tensor& dweight_out) {
  const char* kernel = "token_row_dots";
  kernel_device(kernel, {&dy, &token, &rows, &dweight_out});
  TESSERA_CHECK(dy.ndim() >= 2, kernel, ": dy ", shape_str(dy.shape()), " is not [tokens, hidden]");
  const int64_t h = dy.dim(-1), R = token.numel();
  check_rows(kernel, "rows", rows, h);
  check_numel(kernel, "rows", rows, R * h);
  check_numel(kernel, "dweight_out", dweight_out, R);
  cpu::token_row_dots(dy.f32(), token.i32(), rows.f32(), dweight_out.f32(), R, h, h > 0 ? dy.numel() / h : 0);
}

void jitter_multiply(const Tensor& x, const Tensor& y, float eps, uint64_t seed, uint64_t stream,
                     const DropoutRegion& region) {
  const char* kernel = "jitter_multiply";
  kernel_device(kernel, {&x, &y});
  const int64_t n = region.seq * region.batch * region.hidden;
  check_numel(kernel, "x", x, n);
  check_numel(kernel, "y", y, n);
  cpu::jitter_multiply(x.f32(), y.f32(), eps, seed, stream, region);
}

}  // namespace tessera::kernels
