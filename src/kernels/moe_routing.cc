#include "kernels/moe_routing.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/moe_routing.h"
#include "kernels/cuda/moe_routing.h"
#include "kernels/cuda/token_layout.h"
#include "kernels/device_dispatch.h"
#include "kernels/dropout.h"
#include "kernels/tensor_ops.h"

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

// Scratch on a device: fp32 or int32 [n].
Tensor scratch(int64_t n, DType type, Device d) { return Tensor::empty({n}, type, d); }

// On a GPU the indices of `ids` [n] are checked on the device (the CPU loops check their own): the first
// outside [lo, hi) is named, as the CPU's check names it.
void check_ids_on_device(const char* kernel, const char* what, const Tensor& ids, int64_t lo, int64_t hi, Device d) {
  if constexpr (kWithCuda) {
    int32_t id = 0;
    const int64_t at = cuda::first_id_outside(ids.i32(), ids.numel(), lo, hi, d.index, &id);
    TESSERA_CHECK(at < 0, kernel, ": ", what, " ", id, " at ", at, " is outside [", lo, ", ", hi, ")");
  }
}

// The sum in token order of per-token terms a GPU left in `terms` ([T] doubles, in an int64 tensor: a
// tensor has no fp64 dtype; this is only its storage), as the CPU adds them.
double sum_terms(const Tensor& terms) {
  const Tensor host = to_device(terms, Device::cpu());
  const double* v = static_cast<const double*>(host.host_raw());
  double sum = 0;
  for (int64_t t = 0; t < host.numel(); ++t) sum += v[t];
  return sum;
}

// A term sum's destination: one double, in an int64 [1] tensor (a loss total, kernels/vocab_parallel_loss.h).
void check_sum_out(const char* kernel, const Tensor& out) {
  TESSERA_CHECK(out.dtype() == DType::I64 && out.numel() == 1, kernel, ": out is ", dtype_name(out.dtype()), " ",
                shape_str(out.shape()), ", not one double (int64 [1], a loss total)");
}

// dst (any device) = the host vector v, of as many elements.
template <typename T>
void upload(const std::vector<T>& v, const Tensor& dst) {
  if (dst.device().type == DeviceType::CPU) {
    std::memcpy(dst.host_raw(), v.data(), dst.nbytes());
    return;
  }
  Tensor host = Tensor::empty(dst.shape(), dst.dtype(), Device::cpu());
  std::memcpy(host.host_raw(), v.data(), host.nbytes());
  transfer(dst, host);
}

}  // namespace

void topk_router_forward(const Tensor& logits, const TopkRouterOptions& opt, const Tensor& expert_bias,
                         const Tensor& indices_out, const Tensor& probs_out) {
  const char* kernel = "topk_router_forward";
  const Device d = kernel_device(kernel, {&logits, &expert_bias, &indices_out, &probs_out}, Impl::kCpuAndCuda);
  check_logits(kernel, logits);
  const int64_t T = logits.dim(0), E = logits.dim(1);
  check_numel(kernel, "indices_out", indices_out, T * opt.topk);
  check_numel(kernel, "probs_out", probs_out, T * opt.topk);
  if (expert_bias.defined()) check_numel(kernel, "expert_bias", expert_bias, E);
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      cpu::check_router_options(kernel, opt, E, expert_bias.defined());
      const Tensor f = scratch(T * cuda::router_float_scratch(E, opt), DType::F32, d);
      const Tensor i = scratch(T * cuda::router_int_scratch(opt), DType::I32, d);
      return cuda::topk_router_forward(logits.f32(), T, E, opt, f32_or_null(expert_bias), indices_out.i32(),
                                       probs_out.f32(), f.f32(), i.i32());
    }
  cpu::topk_router_forward(logits.f32(), T, E, opt, f32_or_null(expert_bias), indices_out.i32(), probs_out.f32());
}

void topk_router_backward(const Tensor& logits, const Tensor& indices, const Tensor& dprobs,
                          const TopkRouterOptions& opt, const Tensor& dlogits) {
  const char* kernel = "topk_router_backward";
  const Device d = kernel_device(kernel, {&logits, &indices, &dprobs, &dlogits}, Impl::kCpuAndCuda);
  check_logits(kernel, logits);
  const int64_t T = logits.dim(0), E = logits.dim(1);
  check_numel(kernel, "indices", indices, T * opt.topk);
  check_numel(kernel, "dprobs", dprobs, T * opt.topk);
  check_numel(kernel, "dlogits", dlogits, T * E);
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      cpu::check_router_options(kernel, opt, E, false);
      check_ids_on_device(kernel, "expert index", indices, 0, E, d);
      const Tensor f = scratch(T * (2 * E + 2 * opt.topk), DType::F32, d);
      return cuda::topk_router_backward(logits.f32(), indices.i32(), dprobs.f32(), T, E, opt, dlogits.f32(), f.f32());
    }
  cpu::topk_router_backward(logits.f32(), indices.i32(), dprobs.f32(), T, E, opt, dlogits.f32());
}

void aux_loss_counts(const Tensor& logits, int64_t topk, RouterScoreFunction score, int64_t groups,
                     const Tensor& counts_out) {
  const char* kernel = "aux_loss_counts";
  const Device d = kernel_device(kernel, {&logits, &counts_out}, Impl::kCpuAndCuda);
  check_logits(kernel, logits);
  const int64_t T = logits.dim(0), E = logits.dim(1);
  check_numel(kernel, "counts_out", counts_out, groups * E);
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      cpu::check_groups(kernel, T, E, groups, topk);
      const Tensor f = scratch(T * (E + topk), DType::F32, d), top = scratch(T * topk, DType::I32, d);
      return cuda::aux_loss_counts(logits.f32(), T, E, topk, score, groups, counts_out.f32(), f.f32(), top.i32());
    }
  cpu::aux_loss_counts(logits.f32(), T, E, topk, score, groups, counts_out.f32());
}

double aux_loss_forward(const Tensor& logits, const Tensor& counts, int64_t topk, RouterScoreFunction score,
                        int64_t tokens_per_group, float coeff) {
  const char* kernel = "aux_loss_forward";
  const Device d = kernel_device(kernel, {&logits, &counts}, Impl::kCpuAndCuda);
  check_logits(kernel, logits);
  const int64_t T = logits.dim(0), E = logits.dim(1);
  const int64_t G = count_groups(kernel, counts, E);
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      cpu::check_aux(kernel, T, E, G, topk, tokens_per_group);
      const Tensor terms = scratch(T, DType::I64, d), f = scratch(T * E, DType::F32, d);
      cuda::aux_loss_terms(logits.f32(), counts.f32(), T, E, G, score, static_cast<double*>(terms.raw()), f.f32());
      return cpu::aux_loss_value(sum_terms(terms), E, G, topk, tokens_per_group, coeff);
    }
  return cpu::aux_loss_forward(logits.f32(), counts.f32(), T, E, G, topk, score, tokens_per_group, coeff);
}

void aux_loss_term_sum_to(const Tensor& logits, const Tensor& counts, int64_t topk, RouterScoreFunction score,
                          int64_t tokens_per_group, const Tensor& out) {
  const char* kernel = "aux_loss_term_sum_to";
  const Device d = kernel_device(kernel, {&logits, &counts, &out}, Impl::kCpuAndCuda);
  check_logits(kernel, logits);
  check_sum_out(kernel, out);
  const int64_t T = logits.dim(0), E = logits.dim(1);
  const int64_t G = count_groups(kernel, counts, E);
  cpu::check_aux(kernel, T, E, G, topk, tokens_per_group);
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      const Tensor terms = scratch(T, DType::I64, d), f = scratch(T * E, DType::F32, d);
      cuda::aux_loss_terms(logits.f32(), counts.f32(), T, E, G, score, static_cast<double*>(terms.raw()), f.f32());
      return cuda::sum_terms_to(static_cast<const double*>(terms.raw()), T, static_cast<double*>(out.raw()));
    }
  const double sum = cpu::aux_loss_term_sum(logits.f32(), counts.f32(), T, E, G, score);
  std::memcpy(out.raw(), &sum, sizeof sum);
}

double aux_loss_value(double term_sum, int64_t experts, int64_t groups, int64_t topk, int64_t tokens_per_group,
                      float coeff) {
  cpu::check_aux("aux_loss_value", 0, experts, groups, topk, tokens_per_group);
  return cpu::aux_loss_value(term_sum, experts, groups, topk, tokens_per_group, coeff);
}

void aux_loss_backward(const Tensor& logits, const Tensor& counts, int64_t topk, RouterScoreFunction score,
                       int64_t tokens_per_group, float coeff, float dloss, const Tensor& dlogits) {
  const char* kernel = "aux_loss_backward";
  const Device d = kernel_device(kernel, {&logits, &counts, &dlogits}, Impl::kCpuAndCuda);
  check_logits(kernel, logits);
  const int64_t T = logits.dim(0), E = logits.dim(1);
  const int64_t G = count_groups(kernel, counts, E);
  check_numel(kernel, "dlogits", dlogits, T * E);
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      cpu::check_aux(kernel, T, E, G, topk, tokens_per_group);
      const Tensor f = scratch(T * E, DType::F32, d);
      return cuda::aux_loss_backward(logits.f32(), counts.f32(), T, E, G, score,
                                     cpu::aux_gradient_scale(E, G, topk, tokens_per_group, coeff, dloss),
                                     dlogits.f32(), f.f32());
    }
  cpu::aux_loss_backward(logits.f32(), counts.f32(), T, E, G, topk, score, tokens_per_group, coeff, dloss,
                         dlogits.f32());
}

double z_loss_forward(const Tensor& logits, float coeff, int64_t total_tokens) {
  const char* kernel = "z_loss_forward";
  const Device d = kernel_device(kernel, {&logits}, Impl::kCpuAndCuda);
  check_logits(kernel, logits);
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      const int64_t T = logits.dim(0), E = logits.dim(1);
      cpu::check_z_loss(kernel, T, E, total_tokens);
      const Tensor terms = scratch(T, DType::I64, d);
      cuda::z_loss_terms(logits.f32(), T, E, static_cast<double*>(terms.raw()));
      return cpu::z_loss_value(sum_terms(terms), coeff, total_tokens);
    }
  return cpu::z_loss_forward(logits.f32(), logits.dim(0), logits.dim(1), coeff, total_tokens);
}

void z_loss_term_sum_to(const Tensor& logits, const Tensor& out) {
  const char* kernel = "z_loss_term_sum_to";
  const Device d = kernel_device(kernel, {&logits, &out}, Impl::kCpuAndCuda);
  check_logits(kernel, logits);
  check_sum_out(kernel, out);
  const int64_t T = logits.dim(0), E = logits.dim(1);
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      const Tensor terms = scratch(T, DType::I64, d);
      cuda::z_loss_terms(logits.f32(), T, E, static_cast<double*>(terms.raw()));
      return cuda::sum_terms_to(static_cast<const double*>(terms.raw()), T, static_cast<double*>(out.raw()));
    }
  const double sum = cpu::z_loss_term_sum(logits.f32(), T, E);
  std::memcpy(out.raw(), &sum, sizeof sum);
}

double z_loss_value(double term_sum, float coeff, int64_t total_tokens) {
  TESSERA_CHECK(total_tokens >= 1, "z_loss_value: ", total_tokens, " tokens");
  return cpu::z_loss_value(term_sum, coeff, total_tokens);
}

void z_loss_backward(const Tensor& logits, float coeff, int64_t total_tokens, float dloss, const Tensor& dlogits) {
  const char* kernel = "z_loss_backward";
  const Device d = kernel_device(kernel, {&logits, &dlogits}, Impl::kCpuAndCuda);
  check_logits(kernel, logits);
  check_numel(kernel, "dlogits", dlogits, logits.numel());
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      cpu::check_z_loss(kernel, logits.dim(0), logits.dim(1), total_tokens);
      return cuda::z_loss_backward(logits.f32(), logits.dim(0), logits.dim(1),
                                   cpu::z_loss_gradient_scale(coeff, total_tokens, dloss), dlogits.f32());
    }
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
  const Device device = kernel_device(kernel, {&indices, &probs}, Impl::kCpuAndCuda);
  TESSERA_CHECK(indices.ndim() == 2, kernel, ": indices ", shape_str(indices.shape()), " are not [tokens, k]");
  const int64_t T = indices.dim(0), k = indices.dim(1);
  check_numel(kernel, "probs", probs, T * k);
  // The rows are planned on the host on any device: each expert's row count sizes its GEMM and the
  // expert-parallel exchange, which the host needs anyway (on a GPU: one copy of [T, k] each way).
  const Tensor host_indices = to_device(indices, Device::cpu()), host_probs = to_device(probs, Device::cpu());
  cpu::ExpertRowList list = cpu::expert_rows(static_cast<const int32_t*>(host_indices.host_raw()),
                                             static_cast<const float*>(host_probs.host_raw()), T, k, experts,
                                             capacity, policy, pad);
  const int64_t R = static_cast<int64_t>(list.token.size());
  ExpertRows out{std::move(list.counts), std::move(list.routed), Tensor::empty({R}, DType::I32, device),
                 Tensor::empty({R}, DType::I32, device), Tensor::empty({R}, DType::F32, device)};
  if (R > 0) {
    upload(list.token, out.token);
    upload(list.slot, out.slot);
    upload(list.prob, out.prob);
  }
  return out;
}

void gather_token_rows(const Tensor& x, const Tensor& token, const Tensor& out) {
  const char* kernel = "gather_token_rows";
  const Device d = kernel_device(kernel, {&x, &token, &out}, Impl::kCpuAndCuda);
  TESSERA_CHECK(x.ndim() >= 2, kernel, ": x ", shape_str(x.shape()), " is not [tokens, hidden]");
  const int64_t h = x.dim(-1), R = token.numel();
  check_numel(kernel, "out", out, R * h);
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      check_ids_on_device(kernel, "token", token, 0, h > 0 ? x.numel() / h : 0, d);
      return cuda::gather_token_rows(x.f32(), token.i32(), out.f32(), R, h);
    }
  cpu::gather_token_rows(x.f32(), token.i32(), out.f32(), R, h, h > 0 ? x.numel() / h : 0);
}

void scatter_add_token_rows(const Tensor& rows, const Tensor& token, const Tensor& weight, const Tensor& y) {
  const char* kernel = "scatter_add_token_rows";
  const Device d = kernel_device(kernel, {&rows, &token, &weight, &y}, Impl::kCpuAndCuda);
  TESSERA_CHECK(y.ndim() >= 2, kernel, ": y ", shape_str(y.shape()), " is not [tokens, hidden]");
  const int64_t h = y.dim(-1), R = token.numel();
  check_rows(kernel, "rows", rows, h);
  check_numel(kernel, "rows", rows, R * h);
  if (weight.defined()) check_numel(kernel, "weight", weight, R);
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      const int64_t T = h > 0 ? y.numel() / h : 0;
      check_ids_on_device(kernel, "token", token, 0, T, d);
      const Tensor begin = scratch(T + 1, DType::I32, d), next = scratch(T, DType::I32, d),
                   order = scratch(R, DType::I32, d);
      return cuda::scatter_add_token_rows(rows.f32(), token.i32(), f32_or_null(weight), y.f32(), R, h, T, begin.i32(),
                                          next.i32(), order.i32());
    }
  cpu::scatter_add_token_rows(rows.f32(), token.i32(), f32_or_null(weight), y.f32(), R, h,
                              h > 0 ? y.numel() / h : 0);
}

void token_row_dots(const Tensor& dy, const Tensor& token, const Tensor& rows, const Tensor& dweight_out) {
  const char* kernel = "token_row_dots";
  const Device d = kernel_device(kernel, {&dy, &token, &rows, &dweight_out}, Impl::kCpuAndCuda);
  TESSERA_CHECK(dy.ndim() >= 2, kernel, ": dy ", shape_str(dy.shape()), " is not [tokens, hidden]");
  const int64_t h = dy.dim(-1), R = token.numel();
  check_rows(kernel, "rows", rows, h);
  check_numel(kernel, "rows", rows, R * h);
  check_numel(kernel, "dweight_out", dweight_out, R);
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      check_ids_on_device(kernel, "token", token, 0, h > 0 ? dy.numel() / h : 0, d);
      return cuda::token_row_dots(dy.f32(), token.i32(), rows.f32(), dweight_out.f32(), R, h);
    }
  cpu::token_row_dots(dy.f32(), token.i32(), rows.f32(), dweight_out.f32(), R, h, h > 0 ? dy.numel() / h : 0);
}

void jitter_multiply(const Tensor& x, const Tensor& y, float eps, uint64_t seed, uint64_t stream,
                     const DropoutRegion& region) {
  const char* kernel = "jitter_multiply";
  const Device d = kernel_device(kernel, {&x, &y}, Impl::kCpuAndCuda);
  const int64_t n = region.seq * region.batch * region.hidden;
  check_numel(kernel, "x", x, n);
  check_numel(kernel, "y", y, n);
  if constexpr (kWithCuda)
    if (on_cuda(d)) {
      cpu::check_jitter(eps, region);
      return cuda::jitter_multiply(x.f32(), y.f32(), eps, seed, stream, region);
    }
  cpu::jitter_multiply(x.f32(), y.f32(), eps, seed, stream, region);
}

}  // namespace tessera::kernels
