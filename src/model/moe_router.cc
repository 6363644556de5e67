#include "model/moe_router.h"

#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "kernels/moe_routing.h"
#include "kernels/tensor_ops.h"

namespace tessera::model {
namespace {

constexpr int kJitterSite = 4;  // dropout_stream's site of the router input noise (1-3: dropout)

// The sum over the tensor group of one rank's share of a loss. (Not over the context group: the trainer
// sums every loss over it, as it sums the LM loss of each rank's tokens.)
double tensor_group_sum(double share, const parallel::TensorParallelContext& tp) {
  if (!tp.sequence_parallel || tp.size() == 1) return share;
  Tensor t = kernels::scalar_tensor(share);
  tp.group->all_reduce(t);
  return kernels::scalar_value(t);
}

// The tokens of each whole sequence: under context parallelism ctx.seq is this rank's two chunks of it.
int64_t sequence_tokens(const ForwardContext& ctx) {
  return ctx.context_parallel ? ctx.seq * ctx.context_parallel->size() : ctx.seq;
}

}  // namespace

void RouterRecord::visit(const std::function<void(Tensor&, bool)>& f) {
  f(jittered, true);
  for (Tensor* t : {&logits, &indices, &probs, &counts}) f(*t, false);
}

TopkRouter::TopkRouter(const ModelConfig& config, int64_t layer_number, int64_t experts, const std::string& prefix,
                       ParameterSet& params, const parallel::TensorParallelContext& tp)
    : config_(config), layer_number_(layer_number), experts_(experts), tp_(tp) {
  ParameterSpec w{prefix + "router.weight", {experts, config.hidden_size}, Init::Normal, config.init_method_std, true};
  w.sequence_parallel_grad = tp.sequence_parallel;  // each rank's gradient is its own tokens'
  weight_ = params.add(w);
  if (config.moe.expert_bias) {
    ParameterSpec b{prefix + "router.expert_bias", {experts}, Init::Zeros, 0.0f, false};
    b.expert_bias_offset = config.moe.expert_offset(layer_number);
    expert_bias_ = params.add(b);
  }
}

int64_t TopkRouter::groups(const ForwardContext& ctx) const {
  return config_.moe.load_balancing == LoadBalancing::SeqAuxLoss ? ctx.batch : 1;
}

int64_t TopkRouter::tokens_per_group(const ForwardContext& ctx) const {
  const int64_t seq = sequence_tokens(ctx);
  return config_.moe.load_balancing == LoadBalancing::SeqAuxLoss ? seq : seq * ctx.batch;
}

void TopkRouter::jitter(const Tensor& x, const Tensor& y, const ForwardContext& ctx) const {
  const uint64_t stream = dropout_stream(ctx.iteration, layer_number_, kJitterSite);
  for_each_residual_part(ctx, config_.hidden_size, tp_,
                         [&](int64_t row, int64_t rows, const kernels::DropoutRegion& region) {
                           const bool whole = ctx.context_parallel == nullptr;
                           kernels::jitter_multiply(whole ? x : x.narrow(row, rows), whole ? y : y.narrow(row, rows),
                                                    config_.moe.input_jitter_eps, ctx.seed, stream, region);
                         });
}

void TopkRouter::forward(const Tensor& x, const SublayerContext& sc, RouterRecord& rec) const {
  const MoeConfig& m = config_.moe;
  const ForwardContext& ctx = sc.ctx;
  const int64_t T = x.dim(0), k = m.router.topk;
  Tensor input = x;
  if (ctx.training && m.input_jitter_eps > 0) {
    rec.jittered = Tensor::empty(x.shape());
    jitter(x, rec.jittered, ctx);
    input = rec.jittered;
  }
  // fp32 gating, as Megatron creates the router in fp32 (the routing decision is sensitive to rounding).
  rec.logits = Tensor::empty({T, experts_});
  kernels::linear_forward(input, weight_->value, Tensor(), rec.logits);
  rec.indices = Tensor::empty({T, k}, DType::I32);
  rec.probs = Tensor::empty({T, k});
  kernels::topk_router_forward(rec.logits, m.router, expert_bias_ ? expert_bias_->value : Tensor(), rec.indices,
                               rec.probs);
  if (m.load_balancing != LoadBalancing::None) {
    rec.counts = Tensor::empty({groups(ctx), experts_});
    kernels::aux_loss_counts(rec.logits, k, m.router.score, groups(ctx), rec.counts);
    // Summed over the ranks holding the rest of the sequences' tokens (Megatron's TP x CP group).
    if (tp_.sequence_parallel && tp_.size() > 1) tp_.group->all_reduce(rec.counts);
    if (ctx.context_parallel && ctx.context_parallel->size() > 1) ctx.context_parallel->group->all_reduce(rec.counts);
  }
  if (!ctx.losses) return;
  // Logged as Megatron does: each loss without its coefficient, averaged over the MoE layers.
  const double per_layer = micro_batch_weight(ctx) / static_cast<double>(m.num_moe_layers());
  // Kept on the device (LossSums::keeps_on): each term sum goes to a slot, and settle() finishes it with the
  // host code below. Not where a share is summed over the tensor group first (sequence parallelism: that
  // sum of host scalars comes before the finishing, so it stays per micro-batch).
  const bool deferred = ctx.losses->keeps_on(x.device()) && !(tp_.sequence_parallel && tp_.size() > 1);
  if (deferred) {
    if (m.load_balancing != LoadBalancing::None) {
      const int64_t E = experts_, G = groups(ctx), tpg = tokens_per_group(ctx);
      const Tensor slot = ctx.losses->auxiliary_slot("load_balancing_loss", x.device(), [=](double sum) {
        return kernels::aux_loss_value(sum, E, G, k, tpg, 1.0f) * per_layer;
      });
      kernels::aux_loss_term_sum_to(rec.logits, rec.counts, k, m.router.score, tpg, slot);
    }
    if (m.z_loss_coeff > 0) {
      const int64_t tokens = sequence_tokens(ctx) * ctx.batch;
      const Tensor slot = ctx.losses->auxiliary_slot(
          "z_loss", x.device(), [=](double sum) { return kernels::z_loss_value(sum, 1.0f, tokens) * per_layer; });
      kernels::z_loss_term_sum_to(rec.logits, slot);
    }
    return;
  }
  if (m.load_balancing != LoadBalancing::None) {
    const double share =
        kernels::aux_loss_forward(rec.logits, rec.counts, k, m.router.score, tokens_per_group(ctx), 1.0f);
    ctx.losses->add_auxiliary("load_balancing_loss", tensor_group_sum(share, tp_) * per_layer);
  }
  if (m.z_loss_coeff > 0) {
    const double share = kernels::z_loss_forward(rec.logits, 1.0f, sequence_tokens(ctx) * ctx.batch);
    ctx.losses->add_auxiliary("z_loss", tensor_group_sum(share, tp_) * per_layer);
  }
}

void TopkRouter::backward(const Tensor& dprobs, const Tensor& x, const SublayerContext& sc, RouterRecord& rec,
                          const Tensor& dx) const {
  const MoeConfig& m = config_.moe;
  const ForwardContext& ctx = sc.ctx;
  const int64_t k = m.router.topk;
  Tensor dlogits = Tensor::zeros(rec.logits.shape());
  kernels::topk_router_backward(rec.logits, rec.indices, dprobs, m.router, dlogits);
  const float seed = static_cast<float>(ctx.grad_scale * micro_batch_weight(ctx));
  if (m.load_balancing != LoadBalancing::None && m.aux_loss_coeff > 0)
    kernels::aux_loss_backward(rec.logits, rec.counts, k, m.router.score, tokens_per_group(ctx), m.aux_loss_coeff,
                               seed, dlogits);
  if (m.z_loss_coeff > 0)
    kernels::z_loss_backward(rec.logits, m.z_loss_coeff, sequence_tokens(ctx) * ctx.batch, seed, dlogits);
  const Tensor& input = rec.jittered.defined() ? rec.jittered : x;
  Tensor dinput = Tensor::empty(x.shape());
  kernels::linear_backward(dlogits, input, weight_->value, dinput, weight_->grad, Tensor());
  // The jitter multiplies the router's input only: its gradient reaches x through the same factors.
  if (rec.jittered.defined()) jitter(dinput, dinput, ctx);
  kernels::add_into(dx, dinput);
  rec = RouterRecord();
}

}  // namespace tessera::model
