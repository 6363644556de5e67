#include "optim/distributed_optimizer.h"

#include <algorithm>
#include <cmath>

#include "kernels/adamw.h"
#include "kernels/tensor_ops.h"

namespace tessera::optim {

DistributedOptimizer::DistributedOptimizer(model::ParameterSet& params, const AdamWConfig& config,
                                           parallel::GradBuckets& buckets, comm::ProcessGroup& data_group,
                                           comm::ProcessGroup* model_parallel_group, bool counts_replicated,
                                           bool overlap_param_gather)
    : DistributedOptimizer(params, config, {{&buckets, model_parallel_group, counts_replicated}}, overlap_param_gather) {
  TESSERA_CHECK(data_group.world_ranks() == buckets.group().world_ranks(), "DistributedOptimizer: the buckets reduce "
                "over the ", buckets.group().name(), " group, not over the ", data_group.name(), " group given");
}

DistributedOptimizer::DistributedOptimizer(model::ParameterSet& params, const AdamWConfig& config,
                                           std::vector<GradientGroup> groups, bool overlap_param_gather)
    : params_(params), config_(config), groups_(std::move(groups)), overlap_param_gather_(overlap_param_gather) {
  TESSERA_CHECK(params.allocated(), "DistributedOptimizer: parameters are not allocated");
  for (const GradientGroup& g : groups_) {
    TESSERA_CHECK(g.buckets != nullptr || g.model_group != nullptr,
                  "DistributedOptimizer: a gradient group without buckets nor a model group");
    TESSERA_CHECK(!g.buckets || g.buckets->mode() == parallel::GradBuckets::Mode::ReduceScatter,
                  "DistributedOptimizer: the gradient buckets must reduce-scatter");
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (!groups_[g].buckets) continue;
    std::vector<Segment> mine = segments_for(g, groups_[g].buckets->group().rank());
    segments_.insert(segments_.end(), mine.begin(), mine.end());
  }
  // Moments in flat order whatever the groups, so that one group is laid out exactly as before groups.
  std::sort(segments_.begin(), segments_.end(), [](const Segment& a, const Segment& b) { return a.flat < b.flat; });
  int64_t state = 0;
  for (size_t i = 0; i < segments_.size(); ++i) {
    TESSERA_CHECK(i == 0 || segments_[i - 1].flat + segments_[i - 1].length <= segments_[i].flat,
                  "DistributedOptimizer: gradient groups overlap at flat offset ", segments_[i].flat);
    segments_[i].state = state;
    state += segments_[i].length;
  }
  exp_avg_ = Tensor::zeros({state});
  exp_avg_sq_ = Tensor::zeros({state});
}

std::vector<DistributedOptimizer::Segment> DistributedOptimizer::segments_for(size_t g, int rank) const {
  std::vector<const model::Parameter*> by_offset;
  for (const model::Parameter& p : params_.params()) by_offset.push_back(&p);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const model::Parameter* a, const model::Parameter* b) { return a->offset < b->offset; });
  const parallel::GradBuckets& buckets = *groups_[g].buckets;
  std::vector<Segment> out;
  // Both lists are in increasing flat order: walk them together.
  size_t first = 0;
  for (const parallel::OwnedRange& r : parallel::owned_ranges(buckets.spans(), buckets.group().size(), rank)) {
    while (first < by_offset.size() && by_offset[first]->offset + by_offset[first]->value.numel() <= r.begin) ++first;
    for (size_t i = first; i < by_offset.size() && by_offset[i]->offset < r.end; ++i) {
      const model::Parameter* p = by_offset[i];
      const int64_t b = std::max(r.begin, p->offset), e = std::min(r.end, p->offset + p->value.numel());
      if (b >= e) continue;
      out.push_back({p, b, e - b, 0, r.replicated, g});
    }
  }
  return out;
}

double DistributedOptimizer::norm_of(const Tensor& flat) const {
  // Each group over its data-parallel ranks, then over the rest of the model beside them.
  std::vector<NormPart> parts;
  // Every group's part in the same order on every rank (a group without buckets adds nothing but joins the
  // sum over its model group), so that the collectives match.
  for (const GradientGroup& g : groups_)
    parts.push_back({0, {g.buckets ? &g.buckets->group() : nullptr, g.model_group}});
  for (const Segment& s : segments_) {
    const GradientGroup& group = groups_[s.group];
    // Bucket tails, owned by every data-parallel rank, are counted on its rank 0.
    if (!counts_in_grad_norm(s.param->spec, group.counts_replicated) ||
        (s.replicated && group.buckets->group().rank() != 0))
      continue;
    parts[s.group].squares += kernels::sum_of_squares(flat.flat_range(s.flat, s.length));
  }
  return global_grad_norm(parts, flat.device());
}

StepResult DistributedOptimizer::step(float lr, float loss_scale) {
  StepResult result = adamw_update(moments(), config_, lr, loss_scale, grad_norm(), steps_);
  // Every rank sees the same norm, so all skip together and the parameters stay complete.
  if (result.skipped) return result;
  for (GradientGroup& g : groups_)
    if (g.buckets) g.buckets->start_param_gather(params_.values());
  if (!overlap_param_gather_) wait_for_params();
  return result;
}

void DistributedOptimizer::wait_for_params() {
  for (GradientGroup& g : groups_)
    if (g.buckets) g.buckets->wait_param_gather();
}

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
    kernels::copy(exp_avg_.flat_range(s.state, s.length), full.exp_avg().flat_range(s.flat, s.length));
    kernels::copy(exp_avg_sq_.flat_range(s.state, s.length), full.exp_avg_sq().flat_range(s.flat, s.length));
  }
  steps_ = full.steps();
}

}  // namespace tessera::optim
