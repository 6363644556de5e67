#include "model/moe_layer.h"

#include <algorithm>

#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "kernels/moe_combine.h"
#include "kernels/moe_routing.h"
#include "kernels/tensor_ops.h"

namespace tessera::model {
namespace {

struct MoeRecord final : SavedTensors {
  RouterRecord router;
  kernels::ExpertRows rows;
  std::unique_ptr<parallel::ExpertDispatch> dispatch;
  Tensor expert_input;   // [rows of the local experts, h], expert by expert
  Tensor expert_output;  // [R, h]: each routed row's whole expert output, back on this rank
  std::vector<std::unique_ptr<SavedTensors>> experts;  // each local expert's (empty: it had no rows)
  std::unique_ptr<SavedTensors> grouped;               // or all of theirs, under --moe-grouped-gemm
  std::unique_ptr<SavedTensors> shared, residual;
  Tensor moe_output, residual_output, coefficient_logits;  // residual MoE

  void visit(const std::function<void(Tensor&, bool)>& f) override {
    router.visit(f);
    f(rows.token, false);
    f(rows.slot, false);
    f(rows.prob, false);
    f(expert_input, true);
    f(expert_output, true);
    for (auto& e : experts)
      if (e) e->visit(f);
    if (grouped) grouped->visit(f);
    if (shared) shared->visit(f);
    if (residual) residual->visit(f);
    f(moe_output, true);
    f(residual_output, true);
    f(coefficient_logits, false);
  }
};

// Marks the parameters declared since `first` as one expert's: reduced over the expert-data-parallel
// group, not the dense data-parallel one.
void mark_expert_parameters(ParameterSet& params, size_t first) {
  for (size_t i = first; i < params.params().size(); ++i) {
    ParameterSpec& spec = params.params()[i].spec;
    spec.expert = true;
    spec.grad_reduce = ParameterSpec::GradReduce::ExpertDataParallel;
  }
}

}  // namespace

MoeLayer::MoeLayer(const ModelConfig& config, int64_t layer_number, const std::string& prefix, ParameterSet& params,
                   const parallel::TensorParallelContext& tp)
    : config_(config),
      layer_number_(layer_number),
      ep_(tp.experts ? *tp.experts : parallel::ExpertParallelContext::single_process()),
      expert_tp_{ep_.expert_tensor, false},
      router_(config, layer_number, config.moe.experts(layer_number), prefix, params, tp) {
  const MoeConfig& m = config.moe;
  const int64_t experts = router_.experts();
  TESSERA_CHECK(experts % ep_.ep_size() == 0, prefix, ": ", experts, " experts do not split over ", ep_.ep_size(),
                " expert-parallel ranks");
  const int64_t local = experts / ep_.ep_size();
  for (int64_t j = 0; j < local; ++j) {
    const size_t first = params.params().size();
    const int64_t global = ep_.ep_rank() * local + j;
    experts_.push_back(std::make_unique<Mlp>(config, str_cat(prefix, "experts.local_experts.", global, "."), params,
                                             expert_tp_, MlpOptions{m.ffn_hidden_size, /*reduce=*/false}));
    mark_expert_parameters(params, first);
  }
  if (m.grouped_gemm) {
    std::vector<const Mlp*> local_experts;
    for (const auto& e : experts_) local_experts.push_back(e.get());
    grouped_ = std::make_unique<GroupedMlp>(config, std::move(local_experts));
  }
  if (m.shared_expert_intermediate_size > 0)
    shared_expert_ = std::make_unique<Mlp>(config, prefix + "shared_experts.", params, tp,
                                           MlpOptions{m.shared_expert_intermediate_size});
  if (m.residual) {
    residual_mlp_ = std::make_unique<Mlp>(config, prefix + "residual_mlp.", params, tp);
    ParameterSpec w{prefix + "coefficient.weight", {2, config.hidden_size}, Init::Normal, config.init_method_std, true};
    ParameterSpec b{prefix + "coefficient.bias", {2}, Init::Zeros, 0.0f, false};
    w.sequence_parallel_grad = b.sequence_parallel_grad = tp.sequence_parallel;
    coefficient_weight_ = params.add(w);
    coefficient_bias_ = params.add(b);
  }
}

void MoeLayer::count_routing(const kernels::ExpertRows& rows, int64_t capacity, LossSums& losses) const {
  LossSums::Routing r;
  r.routed.assign(static_cast<size_t>(config_.moe.total_experts()), 0.0);
  r.kept = r.routed;
  const int64_t first = config_.moe.expert_offset(layer_number_);
  for (int64_t e = 0; e < router_.experts(); ++e) {
    r.routed[first + e] = static_cast<double>(rows.routed[e]);
    r.kept[first + e] = static_cast<double>(rows.counts[e]);
    r.entries += r.routed[first + e];
    if (capacity >= 0) r.dropped += static_cast<double>(std::max<int64_t>(0, rows.routed[e] - capacity));
  }
  losses.routing.add(r);
}

std::unique_ptr<SavedTensors> MoeLayer::make_record() const { return std::make_unique<MoeRecord>(); }

Tensor MoeLayer::forward(const Tensor& x, bool x_rounded, const SublayerContext& sc, SavedTensors& record) const {
  auto& rec = static_cast<MoeRecord&>(record);
  const MoeConfig& m = config_.moe;
  const int64_t T = x.dim(0), h = config_.hidden_size;
  // A capacity is of the tokens one rank routes (Megatron's get_capacity), so under context parallelism
  // it would cap each rank's chunks apart, not the whole sequence as one process does (refused in the
  // arguments, train/arguments_context_parallel.cc).
  TESSERA_CHECK(m.dropless() || sc.ctx.context_parallel == nullptr,
                "--moe-expert-capacity-factor cannot be combined with --context-parallel-size");
  router_.forward(x, sc, rec.router);
  const int64_t capacity =
      m.dropless() ? -1 : kernels::expert_capacity(T, m.router.topk, router_.experts(), m.capacity_factor);
  rec.rows = kernels::expert_rows(rec.router.indices, rec.router.probs, router_.experts(), capacity,
                                  m.token_drop_policy, m.pad_expert_input_to_capacity);
  if (sc.ctx.losses) count_routing(rec.rows, capacity, *sc.ctx.losses);
  rec.dispatch = std::make_unique<parallel::ExpertDispatch>(ep_, rec.rows.counts);
  Tensor routed = Tensor::empty({rec.rows.token.numel(), h});
  kernels::gather_token_rows(x, rec.rows.token, routed);
  rec.expert_input = rec.dispatch->dispatch(routed);
  routed = Tensor();
  const std::vector<int64_t>& local_rows = rec.dispatch->local_expert_rows();
  Tensor expert_output;
  rec.experts.clear();
  if (grouped_) {
    rec.grouped = grouped_->make_record();
    expert_output = grouped_->forward(rec.expert_input, local_rows, x_rounded, *rec.grouped);
  } else {
    expert_output = Tensor::zeros(rec.expert_input.shape());
    int64_t at = 0;
    for (size_t j = 0; j < experts_.size(); at += local_rows[j], ++j) {
      const int64_t n = local_rows[j];
      rec.experts.emplace_back();
      if (n == 0) continue;
      rec.experts.back() = experts_[j]->make_record();
      kernels::copy(expert_output.narrow(at, n),
                    experts_[j]->forward(rec.expert_input.narrow(at, n), x_rounded, sc, *rec.experts.back()));
    }
  }
  rec.expert_output = rec.dispatch->combine(expert_output);
  Tensor y = Tensor::zeros({T, h});
  kernels::scatter_add_token_rows(rec.expert_output, rec.rows.token, rec.rows.prob, y);
  if (shared_expert_) {
    rec.shared = shared_expert_->make_record();
    kernels::add_into(y, shared_expert_->forward(x, x_rounded, sc, *rec.shared));
  }
  if (!residual_mlp_) return y;
  rec.moe_output = y;
  rec.residual = residual_mlp_->make_record();
  rec.residual_output = residual_mlp_->forward(x, x_rounded, sc, *rec.residual);
  rec.coefficient_logits = Tensor::empty({T, 2});
  kernels::linear_forward(x, coefficient_weight_->value, coefficient_bias_->value, rec.coefficient_logits);
  Tensor mixed = Tensor::empty({T, h});
  kernels::two_way_mix_forward(rec.moe_output, rec.residual_output, rec.coefficient_logits, mixed);
  return mixed;
}

Tensor MoeLayer::backward(const Tensor& dy_in, const Tensor& x, bool x_rounded, const SublayerContext& sc,
                          SavedTensors& record, bool rec_rounded) const {
  auto& rec = static_cast<MoeRecord&>(record);
  const int64_t T = x.dim(0), h = config_.hidden_size;
  Tensor dx = Tensor::zeros({T, h});
  Tensor dy = dy_in;
  if (residual_mlp_) {
    Tensor dmoe = Tensor::empty({T, h}), dresidual = Tensor::empty({T, h}), dlogits = Tensor::empty({T, 2});
    kernels::two_way_mix_backward(rec.moe_output, rec.residual_output, rec.coefficient_logits, dy_in, dmoe, dresidual,
                                  dlogits);
    Tensor dx_coefficient = Tensor::empty({T, h});
    kernels::linear_backward(dlogits, x, coefficient_weight_->value, dx_coefficient, coefficient_weight_->grad,
                             coefficient_bias_->grad);
    kernels::add_into(dx, dx_coefficient);
    kernels::add_into(dx, residual_mlp_->backward(dresidual, x, x_rounded, sc, *rec.residual, rec_rounded));
    dy = dmoe;
  }
  if (shared_expert_) kernels::add_into(dx, shared_expert_->backward(dy, x, x_rounded, sc, *rec.shared, rec_rounded));
  // y = sum_r prob_r o_r at token_r: the probabilities' gradient, and each row's.
  const int64_t R = rec.rows.token.numel();
  Tensor dprob = Tensor::empty({R});
  kernels::token_row_dots(dy, rec.rows.token, rec.expert_output, dprob);
  Tensor drows = Tensor::empty({R, h});
  kernels::gather_token_rows(dy, rec.rows.token, drows);
  kernels::scale_rows(drows, rec.rows.prob);
  Tensor dexpert_output = rec.dispatch->dispatch(drows);  // combine's adjoint
  drows = Tensor();
  const bool input_rounded = x_rounded || rec_rounded;  // the experts' rows: x's, kept as an activation
  const std::vector<int64_t>& local_rows = rec.dispatch->local_expert_rows();
  Tensor dexpert_input;
  if (grouped_) {
    dexpert_input = grouped_->backward(dexpert_output, rec.expert_input, local_rows, input_rounded, *rec.grouped,
                                       rec_rounded);
  } else {
    dexpert_input = Tensor::zeros(rec.expert_input.shape());
    int64_t at = 0;
    for (size_t j = 0; j < experts_.size(); at += local_rows[j], ++j) {
      const int64_t n = local_rows[j];
      if (n == 0) continue;
      kernels::copy(dexpert_input.narrow(at, n),
                    experts_[j]->backward(dexpert_output.narrow(at, n), rec.expert_input.narrow(at, n),
                                          input_rounded, sc, *rec.experts[j], rec_rounded));
    }
  }
  Tensor drouted = rec.dispatch->combine(dexpert_input);  // dispatch's adjoint: the etp partials summed
  kernels::scatter_add_token_rows(drouted, rec.rows.token, Tensor(), dx);
  Tensor dprobs = Tensor::zeros(rec.router.probs.shape());
  kernels::scatter_slot_values(dprob, rec.rows.slot, dprobs);
  router_.backward(dprobs, x, sc, rec.router, dx);
  rec = MoeRecord();
  return dx;
}

Tensor MoeLayer::decode(const Tensor& x, const DecodeLayout&, KvCache&) const {
  // Under expert parallelism every rank of the expert groups decodes the same tokens in step, so the
  // dispatcher carries each rank's rows to the experts as in training (each gets its own back).
  ForwardContext ctx;
  ctx.training = false;
  ctx.seq = x.dim(0);
  ctx.batch = 1;
  const Tensor positions;
  const SublayerContext sc{ctx, positions};
  MoeRecord rec;
  return forward(x, false, sc, rec);
}

std::unique_ptr<Sublayer> make_feed_forward(const ModelConfig& config, int64_t layer_number, const std::string& prefix,
                                            ParameterSet& params, const parallel::TensorParallelContext& tp) {
  if (config.moe.experts(layer_number) > 0) return std::make_unique<MoeLayer>(config, layer_number, prefix, params, tp);
  return std::make_unique<Mlp>(config, prefix, params, tp);
}

}  // namespace tessera::model
