#include "comm/parallel_state.h"

#include <gtest/gtest.h>

namespace tessera::comm {
namespace {

std::string error_of(const ParallelLayout& layout) {
  try {
    validate_layout(layout);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ParallelLayout, ValidateNamesTheFlagsTheirValuesAndTheRule) {
  EXPECT_EQ(error_of({8, 2, 2}), "");
  EXPECT_EQ(error_of({8, 8, 1}), "");
  std::string e = error_of({4, 3, 1});
  EXPECT_NE(e.find("--tensor-model-parallel-size (3)"), std::string::npos) << e;
  EXPECT_NE(e.find("--pipeline-model-parallel-size (1)"), std::string::npos) << e;
  EXPECT_NE(e.find("world size (4)"), std::string::npos) << e;
  EXPECT_NE(e.find("tp x pp must divide the world size"), std::string::npos) << e;
  e = error_of({8, 2, 3});
  EXPECT_NE(e.find("= 6 must divide the world size (8)"), std::string::npos) << e;
  EXPECT_EQ(error_of({4, 0, 1}), "--tensor-model-parallel-size must be at least 1, got 0");
  EXPECT_EQ(error_of({4, 1, -2}), "--pipeline-model-parallel-size must be at least 1, got -2");
}

TEST(ParallelLayout, CoordinatesFollowMegatronsOrder) {
  ParallelLayout layout{8, 2, 2};  // tp 2, dp 2, pp 2
  RankCoordinates c = coordinates_of(layout, 5);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.dp, 0);
  EXPECT_EQ(c.pp, 1);
  c = coordinates_of(layout, 2);
  EXPECT_EQ(c.tp, 0);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 0);
  EXPECT_EQ(world_rank_of(layout, {1, 0, 1}), 5);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(world_rank_of(layout, coordinates_of(layout, r)), r);
  EXPECT_THROW(coordinates_of(layout, 8), Error);
  EXPECT_THROW(world_rank_of(layout, {2, 0, 0}), Error);
}

TEST(ParallelLayout, DescribeListsEveryGroupKind) {
  EXPECT_EQ(describe_layout({8, 2, 2}, 5),
            "rank 5 -> tp 1, dp 0, pp 1\n"
            "tensor groups: [0, 1] [2, 3] [4, 5] [6, 7]\n"
            "data groups: [0, 2] [1, 3] [4, 6] [5, 7]\n"
            "pipeline groups: [0, 4] [1, 5] [2, 6] [3, 7]\n"
            "model-parallel groups: [0, 1, 4, 5] [2, 3, 6, 7]\n"
            "embedding groups: [0, 4] [1, 5] [2, 6] [3, 7]");
  EXPECT_EQ(describe_layout({8, 1, 4}, 3),
            "rank 3 -> tp 0, dp 1, pp 1\n"
            "tensor groups: [0] [1] [2] [3] [4] [5] [6] [7]\n"
            "data groups: [0, 1] [2, 3] [4, 5] [6, 7]\n"
            "pipeline groups: [0, 2, 4, 6] [1, 3, 5, 7]\n"
            "model-parallel groups: [0, 2, 4, 6] [1, 3, 5, 7]\n"
            "embedding groups: [0, 6] [1, 7]");
}

TEST(ParallelState, SingleProcessHasOneMemberGroups) {
  auto ps = ParallelState::single_process();
  EXPECT_EQ(ps->layout().world_size, 1);
  EXPECT_EQ(ps->world_rank(), 0);
  EXPECT_TRUE(ps->is_first_pipeline_stage());
  EXPECT_TRUE(ps->is_last_pipeline_stage());
  ASSERT_NE(ps->embedding_group(), nullptr);
  for (ProcessGroup* g : {&ps->tensor_group(), &ps->data_group(), &ps->pipeline_group(),
                          &ps->model_parallel_group(), ps->embedding_group()}) {
    EXPECT_EQ(g->size(), 1);
    EXPECT_EQ(g->rank(), 0);
    EXPECT_EQ(g->world_ranks(), std::vector<int>{0});
  }
  EXPECT_EQ(ps->tensor_group().name(), "tensor");
  EXPECT_EQ(ps->data_group().name(), "data");
  EXPECT_EQ(ps->pipeline_group().name(), "pipeline");
  EXPECT_EQ(ps->model_parallel_group().name(), "model-parallel");
  EXPECT_EQ(ps->embedding_group()->name(), "embedding");
  EXPECT_EQ(ps->describe(),
            "rank 0 -> tp 0, dp 0, pp 0\n"
            "tensor groups: [0]\n"
            "data groups: [0]\n"
            "pipeline groups: [0]\n"
            "model-parallel groups: [0]\n"
            "embedding groups: [0]");
}

}  // namespace
}  // namespace tessera::comm
