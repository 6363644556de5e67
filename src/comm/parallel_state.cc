#include "comm/parallel_state.h"

#include <iterator>
#include <vector>

namespace tessera::comm {

void validate_layout(const ParallelLayout& layout) {
  TESSERA_CHECK(layout.world_size >= 1, "the world size must be at least 1, got ", layout.world_size);
  TESSERA_CHECK(layout.tensor_model_parallel_size >= 1, "--tensor-model-parallel-size must be at least 1, got ",
                layout.tensor_model_parallel_size);
  TESSERA_CHECK(layout.pipeline_model_parallel_size >= 1,
                "--pipeline-model-parallel-size must be at least 1, got ", layout.pipeline_model_parallel_size);
  const int tp = layout.tensor_model_parallel_size, pp = layout.pipeline_model_parallel_size;
  TESSERA_CHECK(layout.world_size % (tp * pp) == 0, "--tensor-model-parallel-size (", tp,
                ") x --pipeline-model-parallel-size (", pp, ") = ", tp * pp, " must divide the world size (",
                layout.world_size, "): tp x pp must divide the world size");
}

RankCoordinates coordinates_of(const ParallelLayout& layout, int world_rank) {
  TESSERA_CHECK(world_rank >= 0 && world_rank < layout.world_size, "coordinates_of: rank ", world_rank,
                " is outside a world of ", layout.world_size);
  int tp = layout.tensor_model_parallel_size, dp = layout.data_parallel_size();
  return {world_rank % tp, world_rank / tp % dp, world_rank / (tp * dp)};
}

int world_rank_of(const ParallelLayout& layout, RankCoordinates c) {
  const int tp = layout.tensor_model_parallel_size, dp = layout.data_parallel_size(),
            pp = layout.pipeline_model_parallel_size;
  TESSERA_CHECK(c.tp >= 0 && c.tp < tp && c.dp >= 0 && c.dp < dp && c.pp >= 0 && c.pp < pp,
                "world_rank_of: coordinates tp ", c.tp, ", dp ", c.dp, ", pp ", c.pp,
                " are outside the layout tp ", tp, ", dp ", dp, ", pp ", pp);
  return c.tp + tp * (c.dp + dp * c.pp);
}

namespace {

enum class GroupKind { Tensor, Data, Pipeline, ModelParallel, Embedding };

struct GroupKindInfo {
  GroupKind kind;
  const char* name;
};
// The order in which ParallelState creates the groups (the same on every rank, as split requires).
constexpr GroupKindInfo kGroupKinds[] = {{GroupKind::Tensor, "tensor"},
                                         {GroupKind::Data, "data"},
                                         {GroupKind::Pipeline, "pipeline"},
                                         {GroupKind::ModelParallel, "model-parallel"},
                                         {GroupKind::Embedding, "embedding"}};

// Every group of one kind, each listing its world ranks in group-rank order. Both the groups that
// ParallelState creates and describe() come from here, so the log shows exactly what was built.
std::vector<std::vector<int>> groups_of(const ParallelLayout& l, GroupKind kind) {
  const int tp = l.tensor_model_parallel_size, dp = l.data_parallel_size(), pp = l.pipeline_model_parallel_size;
  auto rank = [&](int t, int d, int p) { return world_rank_of(l, {t, d, p}); };
  std::vector<std::vector<int>> groups;
  switch (kind) {
    case GroupKind::Tensor:  // same (dp, pp)
      for (int p = 0; p < pp; ++p)
        for (int d = 0; d < dp; ++d) {
          groups.emplace_back();
          for (int t = 0; t < tp; ++t) groups.back().push_back(rank(t, d, p));
        }
      break;
    case GroupKind::Data:  // same (tp, pp)
      for (int p = 0; p < pp; ++p)
        for (int t = 0; t < tp; ++t) {
          groups.emplace_back();
          for (int d = 0; d < dp; ++d) groups.back().push_back(rank(t, d, p));
        }
      break;
    case GroupKind::Pipeline:  // same (tp, dp)
      for (int d = 0; d < dp; ++d)
        for (int t = 0; t < tp; ++t) {
          groups.emplace_back();
          for (int p = 0; p < pp; ++p) groups.back().push_back(rank(t, d, p));
        }
      break;
    case GroupKind::ModelParallel:  // same dp; in world-rank order
      for (int d = 0; d < dp; ++d) {
        groups.emplace_back();
        for (int p = 0; p < pp; ++p)
          for (int t = 0; t < tp; ++t) groups.back().push_back(rank(t, d, p));
      }
      break;
    case GroupKind::Embedding:  // first and last stage of the same (tp, dp); one rank when pp == 1
      for (int d = 0; d < dp; ++d)
        for (int t = 0; t < tp; ++t) {
          groups.push_back({rank(t, d, 0)});
          if (pp > 1) groups.back().push_back(rank(t, d, pp - 1));
        }
      break;
  }
  return groups;
}

std::string format_groups(const std::vector<std::vector<int>>& groups) {
  std::string s;
  for (const auto& g : groups) {
    s += s.empty() ? "[" : " [";
    for (size_t i = 0; i < g.size(); ++i) s += (i ? ", " : "") + std::to_string(g[i]);
    s += "]";
  }
  return s;
}

// Collective over `world`: this rank joins the group of `kind` that holds it (null if none does).
std::unique_ptr<ProcessGroup> make_group(ProcessGroup& world, const ParallelLayout& layout, int world_rank,
                                         const GroupKindInfo& info) {
  std::vector<std::vector<int>> groups = groups_of(layout, info.kind);
  for (size_t color = 0; color < groups.size(); ++color) {
    const std::vector<int>& g = groups[color];
    for (size_t key = 0; key < g.size(); ++key) {
      if (g[key] == world_rank) return world.split(static_cast<int>(color), static_cast<int>(key), info.name);
    }
  }
  return world.split(-1, 0, info.name);
}

}  // namespace

ParallelState::ParallelState(ProcessGroup& world, const ParallelLayout& layout) : layout_(layout) {
  validate_layout(layout);
  TESSERA_CHECK(world.size() == layout.world_size, "ParallelState: the layout is for ", layout.world_size,
                " ranks but the world group has ", world.size());
  world_rank_ = world.rank();
  coords_ = coordinates_of(layout, world_rank_);
  std::unique_ptr<ProcessGroup>* slots[] = {&tensor_, &data_, &pipeline_, &model_parallel_, &embedding_};
  for (size_t i = 0; i < std::size(kGroupKinds); ++i) {
    *slots[i] = make_group(world, layout, world_rank_, kGroupKinds[i]);
  }
}

std::unique_ptr<ParallelState> ParallelState::single_process() {
  std::unique_ptr<ProcessGroup> world = make_single_process_group("world");
  return std::make_unique<ParallelState>(*world, ParallelLayout{});
}

std::string ParallelState::describe() const { return describe_layout(layout_, world_rank_); }

std::string describe_layout(const ParallelLayout& layout, int world_rank) {
  validate_layout(layout);
  RankCoordinates c = coordinates_of(layout, world_rank);
  std::string s = str_cat("rank ", world_rank, " -> tp ", c.tp, ", dp ", c.dp, ", pp ", c.pp);
  for (const GroupKindInfo& info : kGroupKinds) {
    s += str_cat("\n", info.name, " groups: ", format_groups(groups_of(layout, info.kind)));
  }
  return s;
}

}  // namespace tessera::comm
