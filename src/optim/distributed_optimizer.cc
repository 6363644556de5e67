#include "optim/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/adamw.h"

namespace tessera::optim {

DistributedOptimizer::DistributedOptimizer(model::ParameterSet& params, const AdamWConfig& config,
                                           parallel::GradBuckets& buckets, comm::ProcessGroup& data_group,
                                           comm::ProcessGroup* model_parallel_group, bool counts_replicated,
                                           bool overlap_param_gather)
    : params_(params), config_(config), buckets_(buckets), data_group_(data_group),
      model_parallel_group_(model_parallel_group), counts_replicated_(counts_replicated),
      overlap_param_gather_(overlap_param_gather) {
  TESSERA_CHECK(params.allocated(), "DistributedOptimizer: parameters are not allocated");
  TESSERA_CHECK(buckets.mode() == parallel::GradBuckets::Mode::ReduceScatter,
                "DistributedOptimizer: the gradient buckets must reduce-scatter");
  segments_ = segments_for(data_group.rank());
  const int64_t n = segments_.empty() ? 0 : segments_.back().state + segments_.back().length;
  exp_avg_ = Tensor::zeros({n});
  exp_avg_sq_ = Tensor::zeros({n});
}

std::vector<DistributedOptimizer::Segment> DistributedOptimizer::segments_for(int rank) const {
  std::vector<const model::Parameter*> by_offset;
  for (const model::Parameter& p : params_.params()) by_offset.push_back(&p);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const model::Parameter* a, const model::Parameter* b) { return a->offset < b->offset; });
  std::vector<Segment> out;
  int64_t state = 0;
  // Both lists are in increasing flat order: walk them together.
  size_t first = 0;
  for (const parallel::OwnedRange& r : parallel::owned_ranges(buckets_.spans(), data_group_.size(), rank)) {
    while (first < by_offset.size() && by_offset[first]->offset + by_offset[first]->value.numel() <= r.begin) ++first;
    for (size_t i = first; i < by_offset.size() && by_offset[i]->offset < r.end; ++i) {
      const model::Parameter* p = by_offset[i];
      const int64_t b = std::max(r.begin, p->offset), e = std::min(r.end, p->offset + p->value.numel());
      if (b >= e) continue;
      out.push_back({p, b, e - b, state, r.replicated});
      state += e - b;
    }
  }
  return out;
}

double DistributedOptimizer::grad_norm() const {
  const float* g = params_.grads().f32();
  const bool first_data_rank = data_group_.rank() == 0;
  double sum = 0;
  for (const Segment& s : segments_) {
    const model::ParameterSpec& spec = s.param->spec;
    // Never the tied copy (its original is counted on the first stage), replicated-over-tensor
    // parameters on one tensor rank, and bucket tails on one data-parallel rank.
    if (spec.tied_copy || !(spec.sharding.sharded() || counts_replicated_) || (s.replicated && !first_data_rank))
      continue;
    sum += kernels::sum_of_squares(g + s.flat, s.length);
  }
  Tensor total = Tensor::empty({1});
  total.f32()[0] = static_cast<float>(sum);
  if (data_group_.size() > 1) data_group_.all_reduce(total);
  if (model_parallel_group_ && model_parallel_group_->size() > 1) model_parallel_group_->all_reduce(total);
  return std::sqrt(static_cast<double>(total.f32()[0]));
}

StepResult DistributedOptimizer::step(float lr, float loss_scale) {
  StepResult result = adamw_update(moments(), config_, lr, loss_scale, grad_norm(), steps_);
  // Every rank sees the same norm, so all skip together and the parameters stay complete.
  if (result.skipped) return result;
  buckets_.start_param_gather(params_.values());
  if (!overlap_param_gather_) buckets_.wait_param_gather();
  return result;
}

void DistributedOptimizer::wait_for_params() { buckets_.wait_param_gather(); }

MomentShard DistributedOptimizer::moments() const {
  MomentShard shard{{}, exp_avg_, exp_avg_sq_, true};
  for (const Segment& s : segments_)
    shard.pieces.push_back({s.param, s.flat - s.param->offset, s.length, s.state, s.replicated});
  return shard;
}

void DistributedOptimizer::load_full_state(const AdamWOptimizer& full) {
  TESSERA_CHECK(full.exp_avg().numel() == params_.numel(), "optimizer state of ", full.exp_avg().numel(),
                " elements does not match the ", params_.numel(), " parameters of this rank");
  for (const Segment& s : segments_) {
    std::memcpy(exp_avg_.f32() + s.state, full.exp_avg().f32() + s.flat, s.length * sizeof(float));
    std::memcpy(exp_avg_sq_.f32() + s.state, full.exp_avg_sq().f32() + s.flat, s.length * sizeof(float));
  }
  steps_ = full.steps();
}

}  // namespace tessera::optim
