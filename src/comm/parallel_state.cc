#include "comm/parallel_state.h"

#include "comm/rank_generator.h"

namespace tessera::comm {

namespace {

// Megatron-Core's decoder_rank_generator: ep = 1.
RankGenerator dense_generator(const ParallelLayout& l) {
  DimSizes s;
  s[Dim::Tp] = l.tensor_model_parallel_size;
  s[Dim::Cp] = l.context_parallel_size;
  s[Dim::Dp] = l.data_parallel_size();
  s[Dim::Pp] = l.pipeline_model_parallel_size;
  return RankGenerator(s, l.order);
}

// Megatron-Core's expert_decoder_rank_generator: the tp digit is etp, the dp digit edp, and cp = 1.
RankGenerator expert_generator(const ParallelLayout& l) {
  DimSizes s;
  s[Dim::Tp] = l.expert_tensor_parallel();
  s[Dim::Ep] = l.expert_model_parallel_size;
  s[Dim::Dp] = l.expert_data_parallel_size();
  s[Dim::Pp] = l.pipeline_model_parallel_size;
  return RankGenerator(s, l.order);
}

struct Factor {
  const char* flag;
  const char* symbol;
  int value;
  const char* note = "";  // for a value the user did not give
};

// "--a (2) x --b (3) = 6 must divide the world size (8): a x b must divide the world size". Factors
// of size 1 other than the first and last are left out, so that a layout without context parallelism
// reads exactly as before it existed.
void check_divides(int world_size, const std::vector<Factor>& all) {
  std::vector<Factor> factors;
  int product = 1;
  for (size_t i = 0; i < all.size(); ++i) {
    product *= all[i].value;
    if (i == 0 || i + 1 == all.size() || all[i].value != 1) factors.push_back(all[i]);
  }
  if (world_size % product == 0) return;
  std::string flags, symbols;
  for (const Factor& f : factors) {
    flags += str_cat(flags.empty() ? "" : " x ", f.flag, " (", f.value, f.note, ")");
    symbols += str_cat(symbols.empty() ? "" : " x ", f.symbol);
  }
  throw Error(str_cat(flags, " = ", product, " must divide the world size (", world_size, "): ", symbols,
                      " must divide the world size"));
}

void check_at_least_one(const char* flag, int value) {
  TESSERA_CHECK(value >= 1, flag, " must be at least 1, got ", value);
}

constexpr const char* kGroupKindNames[kNumGroupKinds] = {
    "tensor",       "context",          "data",     "data-with-context",        "tensor-and-context",
    "pipeline",     "model-parallel",   "embedding", "expert-tensor",           "expert-model",
    "expert-data",  "expert-tensor-and-model", "expert-tensor-model-pipeline"};

// Whether the expert layout differs from the dense one's groups (describe() lists it only then).
bool has_expert_layout(const ParallelLayout& l) {
  return l.expert_model_parallel_size > 1 || l.expert_tensor_parallel() != l.tensor_model_parallel_size;
}

}  // namespace

const char* group_kind_name(GroupKind kind) { return kGroupKindNames[static_cast<int>(kind)]; }

void validate_layout(const ParallelLayout& l) {
  TESSERA_CHECK(l.world_size >= 1, "the world size must be at least 1, got ", l.world_size);
  check_at_least_one("--tensor-model-parallel-size", l.tensor_model_parallel_size);
  check_at_least_one("--pipeline-model-parallel-size", l.pipeline_model_parallel_size);
  check_at_least_one("--context-parallel-size", l.context_parallel_size);
  check_at_least_one("--expert-model-parallel-size", l.expert_model_parallel_size);
  if (l.expert_tensor_parallel_size) check_at_least_one("--expert-tensor-parallel-size", *l.expert_tensor_parallel_size);
  const int tp = l.tensor_model_parallel_size, pp = l.pipeline_model_parallel_size;
  check_divides(l.world_size, {{"--tensor-model-parallel-size", "tp", tp},
                               {"--context-parallel-size", "cp", l.context_parallel_size},
                               {"--pipeline-model-parallel-size", "pp", pp}});
  check_divides(l.world_size,
                {{"--expert-tensor-parallel-size", "etp", l.expert_tensor_parallel(),
                  l.expert_tensor_parallel_size ? "" : ", from --tensor-model-parallel-size"},
                 {"--expert-model-parallel-size", "ep", l.expert_model_parallel_size},
                 {"--pipeline-model-parallel-size", "pp", pp}});
  // Both generators parse the order (a bad token, or a left-out dimension of size > 1, throws).
  const RankGenerator dense = dense_generator(l), expert = expert_generator(l);
  // Megatron's two assertions: the expert layers' pipeline stages must be the dense layers' stages.
  const bool ends_with_pp = l.order.size() >= 2 && l.order.compare(l.order.size() - 2, 2, "pp") == 0;
  TESSERA_CHECK(ends_with_pp || pp == 1 || l.expert_data_parallel_size() == l.data_parallel_size(),
                "with --pipeline-model-parallel-size (", pp, ") and the rank order \"", l.order,
                "\", which does not end in pp, the expert data-parallel size (", l.expert_data_parallel_size(),
                ") must equal the data-parallel size (", l.data_parallel_size(),
                "): the dense and expert layers must share their pipeline groups");
  TESSERA_CHECK(dense.ranks({Dim::Pp}) == expert.ranks({Dim::Pp}), "the rank order \"", l.order,
                "\" gives the expert layers (--expert-tensor-parallel-size ", l.expert_tensor_parallel(),
                ", --expert-model-parallel-size ", l.expert_model_parallel_size,
                ") other pipeline groups than the dense layers: they must be the same");
}

RankCoordinates coordinates_of(const ParallelLayout& layout, int world_rank) {
  TESSERA_CHECK(world_rank >= 0 && world_rank < layout.world_size, "coordinates_of: rank ", world_rank,
                " is outside a world of ", layout.world_size);
  const DimSizes d = dense_generator(layout).coordinates(world_rank);
  const DimSizes e = expert_generator(layout).coordinates(world_rank);
  RankCoordinates c;
  c.tp = d[Dim::Tp], c.cp = d[Dim::Cp], c.dp = d[Dim::Dp], c.pp = d[Dim::Pp];
  c.etp = e[Dim::Tp], c.ep = e[Dim::Ep], c.edp = e[Dim::Dp];
  return c;
}

int world_rank_of(const ParallelLayout& layout, RankCoordinates c) {
  const int tp = layout.tensor_model_parallel_size, cp = layout.context_parallel_size,
            dp = layout.data_parallel_size(), pp = layout.pipeline_model_parallel_size;
  TESSERA_CHECK(c.tp >= 0 && c.tp < tp && c.cp >= 0 && c.cp < cp && c.dp >= 0 && c.dp < dp && c.pp >= 0 && c.pp < pp,
                "world_rank_of: coordinates tp ", c.tp, ", cp ", c.cp, ", dp ", c.dp, ", pp ", c.pp,
                " are outside the layout tp ", tp, ", cp ", cp, ", dp ", dp, ", pp ", pp);
  DimSizes d;
  d[Dim::Tp] = c.tp, d[Dim::Cp] = c.cp, d[Dim::Ep] = 0, d[Dim::Dp] = c.dp, d[Dim::Pp] = c.pp;
  return dense_generator(layout).world_rank(d);
}

int expert_world_rank_of(const ParallelLayout& layout, RankCoordinates c) {
  DimSizes e;
  e[Dim::Tp] = c.etp, e[Dim::Cp] = 0, e[Dim::Ep] = c.ep, e[Dim::Dp] = c.edp, e[Dim::Pp] = c.pp;
  return expert_generator(layout).world_rank(e);
}

std::vector<std::vector<int>> groups_of(const ParallelLayout& l, GroupKind kind) {
  switch (kind) {
    case GroupKind::Tensor: return dense_generator(l).ranks({Dim::Tp});
    case GroupKind::Context: return dense_generator(l).ranks({Dim::Cp});
    case GroupKind::Data: return dense_generator(l).ranks({Dim::Dp});
    case GroupKind::DataWithContext: return dense_generator(l).ranks({Dim::Dp, Dim::Cp});
    case GroupKind::TensorAndContext: return dense_generator(l).ranks({Dim::Tp, Dim::Cp});
    case GroupKind::Pipeline: return dense_generator(l).ranks({Dim::Pp});
    case GroupKind::ModelParallel: return dense_generator(l).ranks({Dim::Tp, Dim::Pp});
    case GroupKind::Embedding: {  // Megatron's default_embedding_ranks: one rank when pp == 1
      std::vector<std::vector<int>> groups;
      for (const std::vector<int>& p : dense_generator(l).ranks({Dim::Pp}))
        groups.push_back(p.size() == 1 ? p : std::vector<int>{p.front(), p.back()});
      return groups;
    }
    case GroupKind::ExpertTensor: return expert_generator(l).ranks({Dim::Tp});
    case GroupKind::ExpertModel: return expert_generator(l).ranks({Dim::Ep});
    case GroupKind::ExpertData: return expert_generator(l).ranks({Dim::Dp});
    case GroupKind::ExpertTensorAndModel: return expert_generator(l).ranks({Dim::Tp, Dim::Ep});
    case GroupKind::ExpertTensorModelPipeline: return expert_generator(l).ranks({Dim::Tp, Dim::Ep, Dim::Pp});
  }
  throw Error("groups_of: unknown group kind");
}

namespace {

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
                                         GroupKind kind) {
  std::vector<std::vector<int>> groups = groups_of(layout, kind);
  for (size_t color = 0; color < groups.size(); ++color) {
    const std::vector<int>& g = groups[color];
    for (size_t key = 0; key < g.size(); ++key) {
      if (g[key] == world_rank) return world.split(static_cast<int>(color), static_cast<int>(key), group_kind_name(kind));
    }
  }
  return world.split(-1, 0, group_kind_name(kind));
}

}  // namespace

ParallelState::ParallelState(ProcessGroup& world, const ParallelLayout& layout) : layout_(layout) {
  validate_layout(layout);
  TESSERA_CHECK(world.size() == layout.world_size, "ParallelState: the layout is for ", layout.world_size,
                " ranks but the world group has ", world.size());
  world_rank_ = world.rank();
  coords_ = coordinates_of(layout, world_rank_);
  for (int k = 0; k < kNumGroupKinds; ++k)
    groups_.push_back(make_group(world, layout, world_rank_, static_cast<GroupKind>(k)));
}

void ParallelState::wrap_groups(
    const std::function<std::unique_ptr<ProcessGroup>(std::unique_ptr<ProcessGroup>)>& wrap) {
  for (std::unique_ptr<ProcessGroup>& g : groups_)
    if (g) g = wrap(std::move(g));  // the embedding group is null on the middle pipeline stages
}

std::unique_ptr<ParallelState> ParallelState::single_process() {
  std::unique_ptr<ProcessGroup> world = make_single_process_group("world");
  return std::make_unique<ParallelState>(*world, ParallelLayout{});
}

std::string ParallelState::describe() const { return describe_layout(layout_, world_rank_); }

std::string describe_layout(const ParallelLayout& layout, int world_rank) {
  validate_layout(layout);
  const RankCoordinates c = coordinates_of(layout, world_rank);
  const bool context = layout.context_parallel_size > 1, expert = has_expert_layout(layout);
  // A layout without context or expert parallelism reads as it did before they existed.
  std::string s = str_cat("rank ", world_rank, " -> tp ", c.tp, context ? str_cat(", cp ", c.cp) : "", ", dp ",
                          c.dp, ", pp ", c.pp);
  if (expert) s += str_cat("; expert layers: etp ", c.etp, ", ep ", c.ep, ", edp ", c.edp);
  std::vector<GroupKind> kinds{GroupKind::Tensor, GroupKind::Data, GroupKind::Pipeline, GroupKind::ModelParallel,
                               GroupKind::Embedding};
  if (context) kinds.insert(kinds.end(), {GroupKind::Context, GroupKind::DataWithContext, GroupKind::TensorAndContext});
  if (expert)
    kinds.insert(kinds.end(), {GroupKind::ExpertTensor, GroupKind::ExpertModel, GroupKind::ExpertData,
                               GroupKind::ExpertTensorAndModel, GroupKind::ExpertTensorModelPipeline});
  for (GroupKind kind : kinds) s += str_cat("\n", group_kind_name(kind), " groups: ", format_groups(groups_of(layout, kind)));
  const std::string order = dense_generator(layout).order();
  if (order != kDefaultRankOrder) s += str_cat("\nrank order: ", order);
  return s;
}

}  // namespace tessera::comm
