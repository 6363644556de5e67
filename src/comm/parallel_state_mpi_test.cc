// ParallelState under mpirun: for every valid (tp, pp) at the running world size, each group holds
// exactly the ranks Megatron's layout formula says, and a collective over it reaches exactly them.
#include "comm/parallel_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "comm/mpi_process_group.h"
#include "comm/mpi_test_main.h"

namespace tessera::comm {
namespace {

// Every layout whose tp x pp divides the world size, in the same order on every rank.
std::vector<ParallelLayout> valid_layouts(int world_size) {
  std::vector<ParallelLayout> layouts;
  for (int tp = 1; tp <= world_size; ++tp)
    for (int pp = 1; pp <= world_size; ++pp) {
      if (world_size % (tp * pp) == 0) layouts.push_back({world_size, tp, pp});
    }
  return layouts;
}

std::string label(const ParallelLayout& l) {
  return str_cat("world ", l.world_size, " tp ", l.tensor_model_parallel_size, " pp ",
                 l.pipeline_model_parallel_size);
}

// The world ranks r (ascending) whose coordinates satisfy `keep`.
std::vector<int> ranks_where(const ParallelLayout& l, const std::function<bool(RankCoordinates)>& keep) {
  std::vector<int> ranks;
  for (int r = 0; r < l.world_size; ++r) {
    if (keep(coordinates_of(l, r))) ranks.push_back(r);
  }
  return ranks;
}

// The group's membership and order, its rank, and that an all-reduce of world ranks sums its members.
void check_group(ProcessGroup& g, const char* name, const std::vector<int>& expected, int world_rank) {
  SCOPED_TRACE(name);
  EXPECT_EQ(g.name(), name);
  EXPECT_EQ(g.world_ranks(), expected);
  ASSERT_EQ(g.size(), static_cast<int>(expected.size()));
  ASSERT_TRUE(g.rank() >= 0 && g.rank() < g.size());
  EXPECT_EQ(expected[g.rank()], world_rank);
  Tensor t = Tensor::empty({1}, DType::I64);
  t.i64()[0] = world_rank;
  g.all_reduce(t);
  EXPECT_EQ(t.i64()[0], std::accumulate(expected.begin(), expected.end(), int64_t{0}));
}

TEST(ParallelState, EveryLayoutBuildsMegatronsGroups) {
  auto world = make_mpi_world_group();
  const int me = world->rank();
  for (const ParallelLayout& layout : valid_layouts(world->size())) {
    SCOPED_TRACE(label(layout));
    for (int r = 0; r < layout.world_size; ++r) EXPECT_EQ(world_rank_of(layout, coordinates_of(layout, r)), r);

    ParallelState ps(*world, layout);
    const RankCoordinates c = ps.coordinates();
    const int pp = layout.pipeline_model_parallel_size;
    EXPECT_EQ(ps.world_rank(), me);
    EXPECT_EQ(world_rank_of(layout, c), me);
    EXPECT_EQ(ps.is_first_pipeline_stage(), c.pp == 0);
    EXPECT_EQ(ps.is_last_pipeline_stage(), c.pp == pp - 1);

    // Ascending world rank is group-rank order for every kind, since tp is fastest and pp slowest.
    check_group(ps.tensor_group(), "tensor",
                ranks_where(layout, [&](RankCoordinates o) { return o.dp == c.dp && o.pp == c.pp; }), me);
    check_group(ps.data_group(), "data",
                ranks_where(layout, [&](RankCoordinates o) { return o.tp == c.tp && o.pp == c.pp; }), me);
    check_group(ps.pipeline_group(), "pipeline",
                ranks_where(layout, [&](RankCoordinates o) { return o.tp == c.tp && o.dp == c.dp; }), me);
    check_group(ps.model_parallel_group(), "model-parallel",
                ranks_where(layout, [&](RankCoordinates o) { return o.dp == c.dp; }), me);
    EXPECT_EQ(ps.tensor_group().rank(), c.tp);
    EXPECT_EQ(ps.data_group().rank(), c.dp);
    EXPECT_EQ(ps.pipeline_group().rank(), c.pp);

    if (c.pp == 0 || c.pp == pp - 1) {
      ASSERT_NE(ps.embedding_group(), nullptr);
      check_group(*ps.embedding_group(), "embedding", ranks_where(layout, [&](RankCoordinates o) {
                    return o.tp == c.tp && o.dp == c.dp && (o.pp == 0 || o.pp == pp - 1);
                  }), me);
    } else {
      EXPECT_EQ(ps.embedding_group(), nullptr);
    }

    EXPECT_EQ(ps.describe(), describe_layout(layout, me));
    std::string first_line = str_cat("rank ", me, " -> tp ", c.tp, ", dp ", c.dp, ", pp ", c.pp, "\n");
    EXPECT_EQ(ps.describe().rfind(first_line, 0), 0u) << ps.describe();
  }
}

// Every layout of the running world size with context or expert parallelism, and every layout with
// pp > 1 in the order that puts pp before dp, in the same order on every rank.
std::vector<ParallelLayout> folded_layouts(int world_size) {
  std::vector<ParallelLayout> layouts;
  for (int tp = 1; tp <= world_size; ++tp)
    for (int cp = 1; cp <= world_size; ++cp)
      for (int pp = 1; pp <= world_size; ++pp) {
        if (world_size % (tp * cp * pp) != 0) continue;
        for (int ep = 1; ep <= world_size; ++ep)
          for (int etp = 1; etp <= world_size; ++etp) {
            if (world_size % (etp * ep * pp) != 0) continue;
            for (const char* order : {kDefaultRankOrder, "tp-cp-ep-pp-dp"}) {
              ParallelLayout l{world_size, tp, pp, cp, ep, etp, order};
              // EveryLayoutBuildsMegatronsGroups has the others; the order only matters with pp > 1.
              const bool folded = cp > 1 || ep > 1 || etp != tp;
              if (std::string(order) == kDefaultRankOrder ? !folded : pp == 1) continue;
              try {
                validate_layout(l);
              } catch (const Error&) {
                continue;  // pp not last with another expert data-parallel size (Megatron refuses it too)
              }
              layouts.push_back(l);
            }
          }
      }
  return layouts;
}

// The real ProcessGroups hold what groups_of computes: for every kind, the group containing this rank
// has its members in order, and all-gathering each member's world rank over it returns exactly them.
TEST(ParallelState, ContextAndExpertGroupsHoldThePureLayoutsRanks) {
  auto world = make_mpi_world_group();
  const int me = world->rank();
  const std::vector<ParallelLayout> layouts = folded_layouts(world->size());
  if (layouts.empty()) GTEST_SKIP() << "one rank has no context or expert parallelism to check";
  for (const ParallelLayout& layout : layouts) {
    SCOPED_TRACE(str_cat(label(layout), " cp ", layout.context_parallel_size, " ep ", layout.expert_model_parallel_size,
                         " etp ", layout.expert_tensor_parallel(), " order ", layout.order));
    ParallelState ps(*world, layout);
    const RankCoordinates c = ps.coordinates();
    ProcessGroup* groups[kNumGroupKinds] = {
        &ps.tensor_group(),       &ps.context_group(),        &ps.data_group(),
        &ps.data_context_group(), &ps.tensor_context_group(), &ps.pipeline_group(),
        &ps.model_parallel_group(), ps.embedding_group(),     &ps.expert_tensor_group(),
        &ps.expert_model_group(), &ps.expert_data_group(),    &ps.expert_tensor_model_group(),
        &ps.expert_tensor_model_pipeline_group()};
    for (int k = 0; k < kNumGroupKinds; ++k) {
      const GroupKind kind = static_cast<GroupKind>(k);
      SCOPED_TRACE(group_kind_name(kind));
      std::vector<int> expected;
      for (const std::vector<int>& g : groups_of(layout, kind))
        if (std::find(g.begin(), g.end(), me) != g.end()) expected = g;
      if (expected.empty()) {  // only the embedding group leaves ranks out
        EXPECT_EQ(kind, GroupKind::Embedding);
        EXPECT_EQ(groups[k], nullptr);
        continue;
      }
      ASSERT_NE(groups[k], nullptr);
      ProcessGroup& g = *groups[k];
      EXPECT_EQ(g.name(), group_kind_name(kind));
      EXPECT_EQ(g.world_ranks(), expected);
      ASSERT_EQ(g.size(), static_cast<int>(expected.size()));
      EXPECT_EQ(expected[g.rank()], me);
      Tensor mine = Tensor::empty({1}, DType::I64), all = Tensor::empty({g.size()}, DType::I64);
      mine.i64()[0] = me;
      g.all_gather(mine, all);
      EXPECT_EQ(std::vector<int64_t>(all.i64(), all.i64() + g.size()),
                std::vector<int64_t>(expected.begin(), expected.end()));
    }
    EXPECT_EQ(ps.context_group().rank(), c.cp);
    EXPECT_EQ(ps.expert_tensor_group().rank(), c.etp);
    EXPECT_EQ(ps.expert_model_group().rank(), c.ep);
    EXPECT_EQ(ps.expert_data_group().rank(), c.edp);
    EXPECT_EQ(&ps.gradient_group(false), &ps.data_context_group());
    EXPECT_EQ(&ps.gradient_group(true), &ps.expert_data_group());
    EXPECT_EQ(ps.describe(), describe_layout(layout, me));
  }
}

TEST(ParallelState, LayoutForAnotherWorldSizeIsRefused) {
  auto world = make_mpi_world_group();
  ParallelLayout layout{2 * world->size(), 1, 1};
  try {
    ParallelState ps(*world, layout);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(str_cat("the world group has ", world->size())), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::comm
