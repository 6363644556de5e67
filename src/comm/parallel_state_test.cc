#include "comm/parallel_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <sstream>

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


TEST(ParallelLayout, NewFlagsAreValidatedByName) {
  ParallelLayout l{8, 2, 1};
  l.context_parallel_size = 3;
  EXPECT_EQ(error_of(l),
            "--tensor-model-parallel-size (2) x --context-parallel-size (3) x --pipeline-model-parallel-size (1) = 6 "
            "must divide the world size (8): tp x cp x pp must divide the world size");
  l.context_parallel_size = 0;
  EXPECT_EQ(error_of(l), "--context-parallel-size must be at least 1, got 0");
  l = {8, 2, 1};
  l.expert_model_parallel_size = 3;
  EXPECT_EQ(error_of(l),
            "--expert-tensor-parallel-size (2, from --tensor-model-parallel-size) x --expert-model-parallel-size (3) x "
            "--pipeline-model-parallel-size (1) = 6 must divide the world size (8): etp x ep x pp must divide the "
            "world size");
  l.expert_model_parallel_size = 0;
  EXPECT_EQ(error_of(l), "--expert-model-parallel-size must be at least 1, got 0");
  l = {8, 2, 1};
  l.expert_tensor_parallel_size = 0;
  EXPECT_EQ(error_of(l), "--expert-tensor-parallel-size must be at least 1, got 0");
  l.expert_tensor_parallel_size = 8;
  l.expert_model_parallel_size = 2;
  EXPECT_NE(error_of(l).find("--expert-tensor-parallel-size (8) x --expert-model-parallel-size (2)"),
            std::string::npos) << error_of(l);
  // Folding: etp x ep need not divide tp x dp in any particular way, only the world.
  l.expert_tensor_parallel_size = 1;
  l.expert_model_parallel_size = 8;
  EXPECT_EQ(error_of(l), "");
}

TEST(ParallelLayout, OrderIsValidatedAsMegatronDoes) {
  ParallelLayout l{8, 2, 2};
  l.order = "tp-cp-xp-dp-pp";
  EXPECT_EQ(error_of(l), "the rank order \"tp-cp-xp-dp-pp\" has the token \"xp\": each token must be one of tp, cp, "
                         "ep, dp, pp");
  l.order = "tp-cp-tp-dp-pp";
  EXPECT_EQ(error_of(l), "the rank order \"tp-cp-tp-dp-pp\" names tp twice: each token may appear once");
  l.order = "tp-dp";
  EXPECT_EQ(error_of(l), "the rank order \"tp-dp\" leaves out pp, whose size is 2: only a dimension of size 1 may "
                         "be left out");
  l.order = "tp-pp-dp";  // Megatron's old --use-tp-pp-dp-mapping order: cp and ep are 1
  EXPECT_EQ(error_of(l), "");
  l.order = "TP-CP-EP-PP-DP";  // Megatron lower-cases it
  EXPECT_EQ(error_of(l), "");
  // pp not last: the expert layers must keep the dense data-parallel size (Megatron's first assertion) ...
  l.order = "tp-cp-ep-pp-dp";
  l.expert_tensor_parallel_size = 1;
  std::string e = error_of(l);
  EXPECT_NE(e.find("which does not end in pp, the expert data-parallel size (4) must equal the data-parallel size (2)"),
            std::string::npos) << e;
  // ... and their pipeline groups (its second): etp x ep = 2 = tp, but pp sits below ep here.
  l.expert_model_parallel_size = 2;
  EXPECT_EQ(error_of(l), "");
  l.order = "tp-pp-cp-ep-dp";
  e = error_of(l);
  EXPECT_NE(e.find("gives the expert layers (--expert-tensor-parallel-size 1, --expert-model-parallel-size 2) other "
                   "pipeline groups than the dense layers"), std::string::npos) << e;
}

// ---- An independent reference, written differently from RankGenerator: every rank's digits decoded
// by repeated division in the order string's sequence, and a group as the ranks that agree on every
// digit outside the group's dimensions.
struct Reference {
  std::vector<std::string> order;  // every token, omitted ones appended
  std::map<std::string, int> size;
  std::vector<std::map<std::string, int>> digits;  // by world rank

  Reference(int tp, int cp, int ep, int dp, int pp, const std::string& order_string) {
    size = {{"tp", tp}, {"cp", cp}, {"ep", ep}, {"dp", dp}, {"pp", pp}};
    std::string lower = order_string;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::stringstream in(lower);
    for (std::string token; std::getline(in, token, '-');) order.push_back(token);
    for (const auto& [token, s] : size)
      if (std::find(order.begin(), order.end(), token) == order.end()) order.push_back(token);
    const int world = tp * cp * ep * dp * pp;
    for (int r = 0; r < world; ++r) {
      std::map<std::string, int> d;
      int rest = r;
      for (const std::string& token : order) {
        d[token] = rest % size[token];
        rest /= size[token];
      }
      digits.push_back(d);
    }
  }
  // Whether the order string is one RankGenerator accepts for these sizes.
  static bool accepts(const std::vector<int>& sizes, const std::string& order_string) {
    static const char* tokens[] = {"tp", "cp", "ep", "dp", "pp"};
    std::stringstream in(order_string);
    std::vector<std::string> given;
    for (std::string token; std::getline(in, token, '-');) given.push_back(token);
    for (int i = 0; i < 5; ++i)
      if (sizes[i] != 1 && std::find(given.begin(), given.end(), tokens[i]) == given.end()) return false;
    return true;
  }
  // Groups over `dims`, each ascending, sorted by their first rank.
  std::vector<std::vector<int>> groups(const std::vector<std::string>& dims) const {
    std::map<std::vector<int>, std::vector<int>> by_key;
    for (int r = 0; r < static_cast<int>(digits.size()); ++r) {
      std::vector<int> key;
      for (const auto& [token, d] : digits[r])
        if (std::find(dims.begin(), dims.end(), token) == dims.end()) key.push_back(d);
      by_key[key].push_back(r);
    }
    std::vector<std::vector<int>> out;
    for (auto& [key, g] : by_key) out.push_back(g);
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::vector<std::vector<int>> sorted(std::vector<std::vector<int>> groups) {
  std::sort(groups.begin(), groups.end());
  return groups;
}

std::string label(const ParallelLayout& l) {
  return str_cat("world ", l.world_size, " tp ", l.tensor_model_parallel_size, " cp ", l.context_parallel_size, " pp ",
                 l.pipeline_model_parallel_size, " ep ", l.expert_model_parallel_size, " etp ",
                 l.expert_tensor_parallel(), " order ", l.order);
}

// Checks one valid layout against the reference; returns whether it was valid.
bool check_layout(const ParallelLayout& l) {
  const int world = l.world_size, tp = l.tensor_model_parallel_size, cp = l.context_parallel_size,
            pp = l.pipeline_model_parallel_size, dp = l.data_parallel_size(), ep = l.expert_model_parallel_size,
            etp = l.expert_tensor_parallel(), edp = l.expert_data_parallel_size();
  const bool accepted = Reference::accepts({tp, cp, 1, dp, pp}, l.order) &&
                        Reference::accepts({etp, 1, ep, edp, pp}, l.order);
  std::optional<Reference> dense, expert;
  bool valid = accepted;
  if (accepted) {
    dense.emplace(tp, cp, 1, dp, pp, l.order);
    expert.emplace(etp, 1, ep, edp, pp, l.order);
    const bool ends_with_pp = l.order.size() >= 2 && l.order.substr(l.order.size() - 2) == "pp";
    valid = (ends_with_pp || pp == 1 || edp == dp) && dense->groups({"pp"}) == expert->groups({"pp"});
  }
  if (!valid) {
    EXPECT_THROW(validate_layout(l), Error);
    return false;
  }
  EXPECT_NO_THROW(validate_layout(l));

  struct Expected {
    GroupKind kind;
    const Reference& ref;
    std::vector<std::string> dims;
    int size;
  };
  const std::vector<Expected> kinds{
      {GroupKind::Tensor, *dense, {"tp"}, tp},
      {GroupKind::Context, *dense, {"cp"}, cp},
      {GroupKind::Data, *dense, {"dp"}, dp},
      {GroupKind::DataWithContext, *dense, {"dp", "cp"}, dp * cp},
      {GroupKind::TensorAndContext, *dense, {"tp", "cp"}, tp * cp},
      {GroupKind::Pipeline, *dense, {"pp"}, pp},
      {GroupKind::ModelParallel, *dense, {"tp", "pp"}, tp * pp},
      {GroupKind::ExpertTensor, *expert, {"tp"}, etp},
      {GroupKind::ExpertModel, *expert, {"ep"}, ep},
      {GroupKind::ExpertData, *expert, {"dp"}, edp},
      {GroupKind::ExpertTensorAndModel, *expert, {"tp", "ep"}, etp * ep},
      {GroupKind::ExpertTensorModelPipeline, *expert, {"tp", "ep", "pp"}, etp * ep * pp},
  };
  for (const Expected& e : kinds) {
    SCOPED_TRACE(group_kind_name(e.kind));
    const std::vector<std::vector<int>> groups = groups_of(l, e.kind);
    // A partition of the world into groups of the kind's size ...
    std::vector<int> seen(world, 0);
    for (const std::vector<int>& g : groups) {
      EXPECT_EQ(static_cast<int>(g.size()), e.size);
      for (int r : g) seen[r]++;
    }
    EXPECT_EQ(seen, std::vector<int>(world, 1));
    // ... equal to the reference, each in ascending order (which is its group-rank order).
    EXPECT_EQ(sorted(groups), e.ref.groups(e.dims));
  }
  // Embedding: the first and last rank of each pipeline group.
  std::vector<std::vector<int>> embedding;
  for (const std::vector<int>& g : dense->groups({"pp"}))
    embedding.push_back(pp == 1 ? g : std::vector<int>{g.front(), g.back()});
  EXPECT_EQ(sorted(groups_of(l, GroupKind::Embedding)), embedding);

  const auto tensor = groups_of(l, GroupKind::Tensor), context = groups_of(l, GroupKind::Context),
             data = groups_of(l, GroupKind::Data), pipeline = groups_of(l, GroupKind::Pipeline),
             expert_tensor = groups_of(l, GroupKind::ExpertTensor), expert_model = groups_of(l, GroupKind::ExpertModel),
             expert_data = groups_of(l, GroupKind::ExpertData);
  // A rank's place in the group of a dimension.
  auto position = [](const std::vector<std::vector<int>>& groups, int r) {
    for (const auto& g : groups)
      for (size_t i = 0; i < g.size(); ++i)
        if (g[i] == r) return static_cast<int>(i);
    return -1;
  };
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE(str_cat("rank ", r));
    const RankCoordinates c = coordinates_of(l, r);
    const auto& d = dense->digits[r];
    const auto& x = expert->digits[r];
    EXPECT_EQ(c.tp, d.at("tp"));
    EXPECT_EQ(c.cp, d.at("cp"));
    EXPECT_EQ(c.dp, d.at("dp"));
    EXPECT_EQ(c.pp, d.at("pp"));
    EXPECT_EQ(c.pp, x.at("pp"));  // the dense and expert layouts agree on the pipeline stage
    EXPECT_EQ(c.etp, x.at("tp"));
    EXPECT_EQ(c.ep, x.at("ep"));
    EXPECT_EQ(c.edp, x.at("dp"));
    EXPECT_EQ(world_rank_of(l, c), r);
    EXPECT_EQ(expert_world_rank_of(l, c), r);
    EXPECT_EQ(position(tensor, r), c.tp);
    EXPECT_EQ(position(context, r), c.cp);
    EXPECT_EQ(position(data, r), c.dp);
    EXPECT_EQ(position(pipeline, r), c.pp);
    EXPECT_EQ(position(expert_tensor, r), c.etp);
    EXPECT_EQ(position(expert_model, r), c.ep);
    EXPECT_EQ(position(expert_data, r), c.edp);
  }
  // Without expert parallelism the expert layers reduce over exactly the dense data x context ranks, in
  // Megatron's orders (where only ep, of size 1, may sit between cp and dp; an order that puts tp
  // between them takes cp out of the expert layers' data-parallel digit).
  if (ep == 1 && etp == tp && (l.order == kDefaultRankOrder || l.order == "tp-cp-ep-pp-dp")) {
    EXPECT_EQ(sorted(groups_of(l, GroupKind::ExpertData)), sorted(groups_of(l, GroupKind::DataWithContext)));
  }
  return true;
}

// Every permutation of the five tokens, and orders of Megatron's that leave tokens out.
std::vector<std::string> all_orders() {
  std::vector<std::string> tokens{"cp", "dp", "ep", "pp", "tp"}, out;
  do {
    out.push_back(tokens[0] + "-" + tokens[1] + "-" + tokens[2] + "-" + tokens[3] + "-" + tokens[4]);
  } while (std::next_permutation(tokens.begin(), tokens.end()));
  for (const char* o : {"tp-pp-dp", "tp-dp-pp", "tp-ep-dp-pp", "tp-pp-ep-dp"}) out.push_back(o);
  return out;
}

TEST(ParallelLayout, EveryLayoutUpToEightRanksMatchesTheReference) {
  const std::vector<std::string> orders = all_orders();
  ASSERT_EQ(orders.size(), 124u);
  int valid = 0, valid_default = 0, valid_pp_not_last = 0, valid_with_expert = 0, valid_with_context = 0;
  for (int world = 1; world <= 8; ++world)
    for (int tp = 1; tp <= world; ++tp)
      for (int cp = 1; cp <= world; ++cp)
        for (int pp = 1; pp <= world; ++pp) {
          if (world % (tp * cp * pp) != 0) continue;
          for (int ep = 1; ep <= world; ++ep)
            for (int etp = 1; etp <= world; ++etp) {
              if (world % (etp * ep * pp) != 0) continue;
              for (const std::string& order : orders) {
                ParallelLayout l{world, tp, pp, cp, ep, etp, order};
                SCOPED_TRACE(label(l));
                if (!check_layout(l)) continue;
                ++valid;
                valid_default += order == "tp-cp-ep-dp-pp";
                valid_pp_not_last += order == "tp-cp-ep-pp-dp" && pp > 1;
                valid_with_expert += ep > 1 && etp != tp;
                valid_with_context += cp > 1;
                if (::testing::Test::HasFailure()) return;  // one layout's failures are enough to read
              }
            }
        }
  // The loops did reach every kind of layout.
  EXPECT_GT(valid_default, 100);
  EXPECT_GT(valid_pp_not_last, 5);
  EXPECT_GT(valid_with_expert, 100);
  EXPECT_GT(valid_with_context, 100);
  EXPECT_GT(valid, 10000);
}

// Rank assignments printed in Megatron-Core's own documentation and tests, so that the layout is
// anchored to Megatron and not only to the reference above.
TEST(ParallelLayout, MatchesMegatronsDocumentedExamples) {
  using Groups = std::vector<std::vector<int>>;
  // initialize_model_parallel's docstring: 16 GPUs, tp 2, pp 4.
  ParallelLayout l{16, 2, 4};
  EXPECT_EQ(groups_of(l, GroupKind::Data),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(groups_of(l, GroupKind::Tensor),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(groups_of(l, GroupKind::Pipeline), (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  // Its context_parallel_size paragraph: 8 GPUs, tp 4, cp 2.
  l = {8, 4, 1, 2};
  EXPECT_EQ(groups_of(l, GroupKind::Context), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(groups_of(l, GroupKind::Tensor), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // generate_masked_orthogonal_rank_groups's docstring: order tp-pp-dp, sizes 2-2-2 ...
  l = {8, 2, 2};
  l.order = "tp-pp-dp";
  EXPECT_EQ(groups_of(l, GroupKind::Data), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // ... and [tp, dp, pp] = [2, 3, 4] with the dp mask: [0, 2, 4], [1, 3, 5], ..., [19, 21, 23].
  l = {24, 2, 4};
  l.order = "tp-dp-pp";
  Groups data = groups_of(l, GroupKind::Data);
  ASSERT_EQ(data.size(), 8u);
  EXPECT_EQ(data[0], (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(data[1], (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(data[7], (std::vector<int>{19, 21, 23}));
  // tests/unit_tests/test_parallel_state.py, test_different_initialize_order_consistency: on 8 GPUs
  // these (tp, pp, ep) give the same groups and ranks under orders tp-ep-dp-pp and tp-pp-ep-dp.
  for (auto [tp, pp, ep] : std::vector<std::array<int, 3>>{
           {1, 8, 1}, {2, 4, 1}, {4, 2, 1}, {8, 1, 1}, {4, 1, 2}, {1, 1, 8}, {1, 1, 2}, {2, 1, 4}}) {
    SCOPED_TRACE(str_cat("tp ", tp, " pp ", pp, " ep ", ep));
    ParallelLayout a{8, tp, pp, 1, ep, std::nullopt, "tp-ep-dp-pp"}, b = a;
    b.order = "tp-pp-ep-dp";
    for (int k = 0; k < kNumGroupKinds; ++k)
      EXPECT_EQ(sorted(groups_of(a, static_cast<GroupKind>(k))), sorted(groups_of(b, static_cast<GroupKind>(k))))
          << group_kind_name(static_cast<GroupKind>(k));
    for (int r = 0; r < 8; ++r) {
      RankCoordinates ca = coordinates_of(a, r), cb = coordinates_of(b, r);
      EXPECT_EQ(std::vector<int>({ca.tp, ca.dp, ca.pp, ca.ep}), std::vector<int>({cb.tp, cb.dp, cb.pp, cb.ep}));
    }
  }
  // Parallel folding, worked by hand from Megatron-Core's rule: 8 ranks, tp 2 (dp 4) for attention, and
  // for the experts etp 1, ep 4 (edp 2). The expert-parallel ranks [0..3] span two tensor groups.
  l = {8, 2, 1, 1, 4, 1};
  EXPECT_EQ(groups_of(l, GroupKind::ExpertModel), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(groups_of(l, GroupKind::ExpertData), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(groups_of(l, GroupKind::ExpertTensor), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(groups_of(l, GroupKind::Data), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  RankCoordinates c = coordinates_of(l, 6);
  EXPECT_EQ(std::vector<int>({c.tp, c.dp, c.etp, c.ep, c.edp}), std::vector<int>({0, 3, 0, 2, 1}));
}

TEST(ParallelLayout, DescribeAddsContextAndExpertLinesOnlyWhenUsed) {
  ParallelLayout l{8, 2, 1, 2, 4, 1};  // tp 2, cp 2, dp 2; etp 1, ep 4, edp 2
  EXPECT_EQ(describe_layout(l, 5),
            "rank 5 -> tp 1, cp 0, dp 1, pp 0; expert layers: etp 0, ep 1, edp 1\n"
            "tensor groups: [0, 1] [2, 3] [4, 5] [6, 7]\n"
            "data groups: [0, 4] [1, 5] [2, 6] [3, 7]\n"
            "pipeline groups: [0] [1] [2] [3] [4] [5] [6] [7]\n"
            "model-parallel groups: [0, 1] [2, 3] [4, 5] [6, 7]\n"
            "embedding groups: [0] [1] [2] [3] [4] [5] [6] [7]\n"
            "context groups: [0, 2] [1, 3] [4, 6] [5, 7]\n"
            "data-with-context groups: [0, 2, 4, 6] [1, 3, 5, 7]\n"
            "tensor-and-context groups: [0, 1, 2, 3] [4, 5, 6, 7]\n"
            "expert-tensor groups: [0] [1] [2] [3] [4] [5] [6] [7]\n"
            "expert-model groups: [0, 1, 2, 3] [4, 5, 6, 7]\n"
            "expert-data groups: [0, 4] [1, 5] [2, 6] [3, 7]\n"
            "expert-tensor-and-model groups: [0, 1, 2, 3] [4, 5, 6, 7]\n"
            "expert-tensor-model-pipeline groups: [0, 1, 2, 3] [4, 5, 6, 7]");
  l = {8, 2, 2};
  l.order = "tp-cp-ep-pp-dp";
  EXPECT_EQ(describe_layout(l, 5),
            "rank 5 -> tp 1, dp 1, pp 0\n"
            "tensor groups: [0, 1] [2, 3] [4, 5] [6, 7]\n"
            "data groups: [0, 4] [1, 5] [2, 6] [3, 7]\n"
            "pipeline groups: [0, 2] [1, 3] [4, 6] [5, 7]\n"
            "model-parallel groups: [0, 1, 2, 3] [4, 5, 6, 7]\n"
            "embedding groups: [0, 2] [1, 3] [4, 6] [5, 7]\n"
            "rank order: tp-cp-ep-pp-dp");
}

TEST(ParallelState, SingleProcessHasEveryGroupKind) {
  auto ps = ParallelState::single_process();
  for (int k = 0; k < kNumGroupKinds; ++k) {
    const GroupKind kind = static_cast<GroupKind>(k);
    ProcessGroup* g = nullptr;
    switch (kind) {
      case GroupKind::Tensor: g = &ps->tensor_group(); break;
      case GroupKind::Context: g = &ps->context_group(); break;
      case GroupKind::Data: g = &ps->data_group(); break;
      case GroupKind::DataWithContext: g = &ps->data_context_group(); break;
      case GroupKind::TensorAndContext: g = &ps->tensor_context_group(); break;
      case GroupKind::Pipeline: g = &ps->pipeline_group(); break;
      case GroupKind::ModelParallel: g = &ps->model_parallel_group(); break;
      case GroupKind::Embedding: g = ps->embedding_group(); break;
      case GroupKind::ExpertTensor: g = &ps->expert_tensor_group(); break;
      case GroupKind::ExpertModel: g = &ps->expert_model_group(); break;
      case GroupKind::ExpertData: g = &ps->expert_data_group(); break;
      case GroupKind::ExpertTensorAndModel: g = &ps->expert_tensor_model_group(); break;
      case GroupKind::ExpertTensorModelPipeline: g = &ps->expert_tensor_model_pipeline_group(); break;
    }
    ASSERT_NE(g, nullptr) << group_kind_name(kind);
    EXPECT_EQ(g->name(), group_kind_name(kind));
    EXPECT_EQ(g->world_ranks(), std::vector<int>{0});
  }
  EXPECT_EQ(&ps->gradient_group(false), &ps->data_context_group());
  EXPECT_EQ(&ps->gradient_group(true), &ps->expert_data_group());
  EXPECT_EQ(&ps->gradient_model_group(false), &ps->model_parallel_group());
  EXPECT_EQ(&ps->gradient_model_group(true), &ps->expert_tensor_model_pipeline_group());
}

}  // namespace
}  // namespace tessera::comm
