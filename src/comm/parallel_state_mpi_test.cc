// ParallelState under mpirun: for every valid (tp, pp) at the running world size, each group holds
// exactly the ranks Megatron's layout formula says, and a collective over it reaches exactly them.
#include "comm/parallel_state.h"

#include <gtest/gtest.h>

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
