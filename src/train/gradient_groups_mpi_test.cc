// Gradient reduction per data-parallel group under mpirun: in a parameter set where dense and expert
// parameters alternate, the trainer's GroupedGradBuckets sums each parameter's gradient over the group
// its spec names (dense: data x context, expert: expert data), in both bucket modes; and the distributed
// optimizer over both groups takes the same steps as AdamW over gradients reduced by plain all-reduces
// over those groups, with the global norm (which clipping uses) summed over everything exactly once.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/mpi_process_group.h"
#include "comm/mpi_test_main.h"
#include "kernels/adamw.h"
#include "optim/adamw_optimizer.h"
#include "train/gradient_groups.h"

namespace tessera::train {
namespace {

using GradReduce = model::ParameterSpec::GradReduce;

// Interleaved as layers hold them: an embedding (a bucket of its own), then per layer a dense and an
// expert weight. Odd sizes, so that buckets have tails.
void declare(model::ParameterSet& params) {
  auto add = [&](const std::string& name, int64_t n, bool expert, bool shared = false) {
    model::ParameterSpec spec;
    spec.name = name;
    spec.shape = {n};
    spec.init = model::Init::Normal;
    spec.std = 0.02f;
    spec.weight_decay = !shared;
    spec.shared_with_last_stage = shared;
    spec.expert = expert;
    spec.grad_reduce = expert ? GradReduce::ExpertDataParallel : GradReduce::DataParallel;
    params.add(spec);
  };
  add("embedding.word_embeddings.weight", 37, false, true);
  add("decoder.layers.0.self_attention.linear_qkv.weight", 53, false);
  add("decoder.layers.0.mlp.experts.linear_fc1.weight", 29, true);
  add("decoder.layers.1.self_attention.linear_qkv.weight", 41, false);
  add("decoder.layers.1.mlp.experts.linear_fc1.weight", 61, true);
  add("decoder.final_layernorm.weight", 11, false);
}

// Multiples of 1/128 of small size: every sum is exact whatever the order of the reduction, so the
// buckets and the plain all-reduces must agree to the last bit (the 1e-6 tolerance is for the norm).
void fill_gradients(model::ParameterSet& params, int world_rank, int step) {
  float* g = params.grads().f32();
  for (int64_t i = 0; i < params.numel(); ++i)
    g[i] = static_cast<float>((world_rank * 7 + step * 5 + i * 3) % 13 - 6) / 128.0f;
}

struct Case {
  int tp, cp, pp, ep, etp;
};

std::vector<Case> cases_for(int world) {
  std::vector<Case> out;
  for (int pp : {1, 2})
    for (int tp : {1, 2})
      for (int cp : {1, 2})
        for (int ep : {1, 2, 4})
          for (int etp : {1, 2}) {
            if (world % (tp * cp * pp) != 0 || world % (etp * ep * pp) != 0) continue;
            out.push_back({tp, cp, pp, ep, etp});
          }
  return out;
}

comm::ParallelLayout layout_of(int world, const Case& c) {
  return {world, c.tp, c.pp, c.cp, c.ep, c.etp};
}

std::string label(const Case& c) {
  return str_cat("tp ", c.tp, " cp ", c.cp, " pp ", c.pp, " ep ", c.ep, " etp ", c.etp);
}

// The reference: each parameter's gradient all-reduced on its own over the group its spec names.
void reduce_by_parameter(model::ParameterSet& params, const comm::ParallelState& state) {
  for (model::Parameter& p : params.params())
    state.gradient_group(p.spec.grad_reduce == GradReduce::ExpertDataParallel).all_reduce(p.grad);
}

TEST(GradientGroups, SegmentsFollowTheSpecs) {
  model::ParameterSet params;
  declare(params);
  params.allocate(1);
  std::vector<GradientGroupSegments> groups = gradient_group_segments(params);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].reduce, GradReduce::DataParallel);
  EXPECT_EQ(groups[0].segments, (std::vector<parallel::FlatRange>{{0, 90}, {119, 160}, {221, 232}}));
  EXPECT_EQ(groups[0].own_buckets, (std::vector<parallel::FlatRange>{{0, 37}}));
  EXPECT_EQ(groups[1].reduce, GradReduce::ExpertDataParallel);
  EXPECT_EQ(groups[1].segments, (std::vector<parallel::FlatRange>{{90, 119}, {160, 221}}));
  EXPECT_TRUE(groups[1].own_buckets.empty());
}

class GroupedBuckets : public ::testing::TestWithParam<bool> {};  // the distributed optimizer's mode

TEST_P(GroupedBuckets, SumEachParameterOverItsOwnGroup) {
  auto world = comm::make_mpi_world_group();
  const int me = world->rank();
  int layouts_where_groups_differ = 0;
  for (const Case& c : cases_for(world->size())) {
    SCOPED_TRACE(label(c));
    comm::ParallelState state(*world, layout_of(world->size(), c));
    model::ParameterSet params, ref;
    declare(params);
    declare(ref);
    params.allocate(1);
    ref.allocate(1);
    fill_gradients(params, me, 0);
    fill_gradients(ref, me, 0);
    reduce_by_parameter(ref, state);
    if (state.gradient_group(true).world_ranks() != state.gradient_group(false).world_ranks())
      ++layouts_where_groups_differ;

    GroupedGradBuckets buckets(params, state, /*bucket_elements=*/17, /*distributed_optimizer=*/GetParam(),
                               /*model_has_experts=*/true);
    ASSERT_EQ(buckets.buckets().size(), 2u);
    EXPECT_EQ(&buckets.buckets()[0]->group(), &state.data_context_group());
    EXPECT_EQ(&buckets.buckets()[1]->group(), &state.expert_data_group());
    // As backward does: the end of the buffer is final first.
    buckets.mark_final_from(150);
    buckets.finish();
    // Every element this rank owns (all of them under AllReduce) holds its group's sum.
    int64_t checked = 0;
    for (const auto& b : buckets.buckets())
      for (const parallel::OwnedRange& o : b->owned_ranges())
        for (int64_t i = o.begin; i < o.end; ++i, ++checked)
          ASSERT_NEAR(params.grads().f32()[i], ref.grads().f32()[i], 1e-6) << "element " << i;
    if (!GetParam()) {
      EXPECT_EQ(checked, params.numel());
    }
    // The pieces of the two groups never overlap and, under AllReduce, cover the buffer.
    EXPECT_LE(checked, params.numel());
  }
  if (world->size() >= 2) {
    EXPECT_GT(layouts_where_groups_differ, 0) << "no layout tells the two groups apart";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, GroupedBuckets, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "ReduceScatter" : "AllReduce"; });

// The global gradient norm computed independently: every element of the model once, in double, over
// the world: dense parameters from the ranks at tp 0, cp 0, dp 0 (one copy per pipeline stage; they
// are replicated over the tensor group here, as norm weights are), expert parameters from the ranks at
// etp 0, edp 0 (one copy per expert rank and stage).
double reference_norm(const model::ParameterSet& reduced, const comm::ParallelState& state, comm::ProcessGroup& world) {
  const comm::RankCoordinates c = state.coordinates();
  double sum = 0;
  for (const model::Parameter& p : reduced.params()) {
    const bool expert = p.spec.grad_reduce == GradReduce::ExpertDataParallel;
    const bool counts = expert ? (c.etp == 0 && c.edp == 0) : (c.tp == 0 && c.cp == 0 && c.dp == 0);
    if (counts) sum += kernels::sum_of_squares(p.grad);
  }
  Tensor t = Tensor::empty({1}, DType::I64);
  // Exact in integers: the gradients are multiples of 1/128, so their squares of 1/16384.
  t.i64()[0] = std::llround(sum * 16384.0);
  world.all_reduce(t);
  return std::sqrt(static_cast<double>(t.i64()[0]) / 16384.0);
}

TEST(DistributedOptimizerGroups, StepsMatchAdamWOverPlainAllReduces) {
  auto world = comm::make_mpi_world_group();
  const int me = world->rank();
  optim::AdamWConfig config;
  config.weight_decay = 0.1f;
  config.clip_grad = 0.05f;  // below every norm here: the norm decides every update
  for (const Case& c : cases_for(world->size())) {
    SCOPED_TRACE(label(c));
    comm::ParallelState state(*world, layout_of(world->size(), c));
    model::ParameterSet params, ref;
    declare(params);
    declare(ref);
    params.allocate(7);
    ref.allocate(7);
    GroupedGradBuckets buckets(params, state, /*bucket_elements=*/23, /*distributed_optimizer=*/true,
                               /*model_has_experts=*/true);
    optim::DistributedOptimizer opt(params, config, buckets.optimizer_groups());
    optim::AdamWOptimizer ref_opt(ref, config);  // its moments; the step is taken with reference_norm
    int64_t ref_steps = 0;
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE(str_cat("step ", step));
      fill_gradients(params, me, step);
      fill_gradients(ref, me, step);
      reduce_by_parameter(ref, state);
      buckets.finish();
      const double norm = reference_norm(ref, state, *world);
      ASSERT_GT(norm, config.clip_grad);
      EXPECT_NEAR(opt.grad_norm(), norm, 1e-6 * norm);
      const float lr = 0.01f * static_cast<float>(step + 1);
      optim::StepResult got = opt.step(lr);
      optim::adamw_update(ref_opt.moments(), config, lr, 1.0f, norm, ref_steps);
      EXPECT_FALSE(got.skipped);
      EXPECT_NEAR(got.grad_norm, norm, 1e-6 * norm);
      for (const model::Parameter& p : params.params()) {
        const model::Parameter& q = ref.get(p.spec.name);
        for (int64_t i = 0; i < p.value.numel(); ++i)
          ASSERT_NEAR(p.value.f32()[i], q.value.f32()[i], 1e-6) << p.spec.name << " element " << i;
      }
    }
    EXPECT_EQ(opt.steps(), 3);
  }
}

}  // namespace
}  // namespace tessera::train
