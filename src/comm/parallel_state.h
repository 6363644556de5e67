// Megatron-Core's parallel_state: which ranks form each parallel group. Ranks are laid out by the order
// string (default tp-cp-ep-dp-pp, tensor fastest) through two RankGenerators over the same world:
//   dense layers (attention, dense MLP): tp x cp x dp x pp, ep = 1
//   expert layers (MoE "parallel folding"): etp x ep x edp x pp, cp = 1, edp = world / (etp x ep x pp)
// With the default order and cp = 1:  world rank = tp_rank + tp * (dp_rank + dp * pp_rank).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"

namespace tessera::comm {

inline constexpr const char* kDefaultRankOrder = "tp-cp-ep-dp-pp";

struct ParallelLayout {
  int world_size = 1;
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  int context_parallel_size = 1;
  int expert_model_parallel_size = 1;
  // Unset: the tensor-parallel size, as Megatron-Core when --expert-tensor-parallel-size is not given.
  std::optional<int> expert_tensor_parallel_size;
  // Megatron's initialize_model_parallel(order=...): any order of the five tokens; a token of a size-1
  // dimension may be left out (Megatron appends it).
  std::string order = kDefaultRankOrder;

  int data_parallel_size() const {
    return world_size / (tensor_model_parallel_size * context_parallel_size * pipeline_model_parallel_size);
  }
  int expert_tensor_parallel() const { return expert_tensor_parallel_size.value_or(tensor_model_parallel_size); }
  int expert_data_parallel_size() const {
    return world_size / (expert_tensor_parallel() * expert_model_parallel_size * pipeline_model_parallel_size);
  }
};

// Throws an Error naming the flag, its value and the rule unless every size is >= 1, tp x cp x pp and
// etp x ep x pp divide the world size, the order is one Megatron accepts, and the dense and expert
// layouts share their pipeline groups (Megatron's two assertions on it).
void validate_layout(const ParallelLayout& layout);

// A rank's place in both layouts. The first three fields keep their old order, so {tp, dp, pp} still
// initialises a dense position; pp is shared by the two layouts.
struct RankCoordinates {
  int tp = 0, dp = 0, pp = 0;
  int cp = 0;              // dense layout
  int etp = 0, ep = 0, edp = 0;  // expert layout
};
RankCoordinates coordinates_of(const ParallelLayout& layout, int world_rank);
// From the dense coordinates (tp, cp, dp, pp), and from the expert ones (etp, ep, edp, pp).
int world_rank_of(const ParallelLayout& layout, RankCoordinates c);
int expert_world_rank_of(const ParallelLayout& layout, RankCoordinates c);

// Every kind of group ParallelState builds, in the order it builds them (the same on every rank).
enum class GroupKind {
  Tensor,                 // tp                  (dense)
  Context,                // cp                  (dense)
  Data,                   // dp                  (dense)
  DataWithContext,        // dp x cp: what dense gradients are reduced over
  TensorAndContext,       // tp x cp
  Pipeline,               // pp
  ModelParallel,          // tp x pp
  Embedding,              // first and last rank of each pipeline group
  ExpertTensor,           // etp                 (expert)
  ExpertModel,            // ep
  ExpertData,             // edp: what expert gradients are reduced over
  ExpertTensorAndModel,   // etp x ep
  ExpertTensorModelPipeline,  // etp x ep x pp: the rest of the model beside an expert-data group
};
inline constexpr int kNumGroupKinds = 13;
// "tensor", "data-with-context", "expert-data", ...: the ProcessGroup's name and describe()'s label.
const char* group_kind_name(GroupKind kind);

// Every group of one kind over the layout, each listing world ranks in group-rank order (Megatron's
// RankGenerator.get_ranks). ParallelState's groups and describe() both come from here.
std::vector<std::vector<int>> groups_of(const ParallelLayout& layout, GroupKind kind);

// ParallelState::describe() for any rank of any valid layout, computed without communication.
std::string describe_layout(const ParallelLayout& layout, int world_rank);

class ParallelState {
 public:
  // Collective over the world: every rank must call it with the same layout.
  ParallelState(ProcessGroup& world, const ParallelLayout& layout);
  // A single process: every group has one member.
  static std::unique_ptr<ParallelState> single_process();

  const ParallelLayout& layout() const { return layout_; }
  RankCoordinates coordinates() const { return coords_; }
  int world_rank() const { return world_rank_; }

  ProcessGroup& tensor_group() const { return group(GroupKind::Tensor); }
  ProcessGroup& context_group() const { return group(GroupKind::Context); }
  ProcessGroup& data_group() const { return group(GroupKind::Data); }
  ProcessGroup& data_context_group() const { return group(GroupKind::DataWithContext); }
  ProcessGroup& tensor_context_group() const { return group(GroupKind::TensorAndContext); }
  ProcessGroup& pipeline_group() const { return group(GroupKind::Pipeline); }
  ProcessGroup& model_parallel_group() const { return group(GroupKind::ModelParallel); }  // tp x pp of one dp x cp replica
  // First and last pipeline stages of this rank's pipeline group (null on other stages).
  ProcessGroup* embedding_group() const { return groups_[static_cast<int>(GroupKind::Embedding)].get(); }
  ProcessGroup& expert_tensor_group() const { return group(GroupKind::ExpertTensor); }
  ProcessGroup& expert_model_group() const { return group(GroupKind::ExpertModel); }
  ProcessGroup& expert_data_group() const { return group(GroupKind::ExpertData); }
  ProcessGroup& expert_tensor_model_group() const { return group(GroupKind::ExpertTensorAndModel); }
  ProcessGroup& expert_tensor_model_pipeline_group() const { return group(GroupKind::ExpertTensorModelPipeline); }

  // The data-parallel group that sums a parameter's gradient: dense parameters over data x context
  // ranks, expert parameters over the expert-data-parallel ranks (Megatron-Core's two DDP buffers).
  ProcessGroup& gradient_group(bool expert) const { return expert ? expert_data_group() : data_context_group(); }
  // The ranks holding the rest of the model beside that group (the gradient norm's second sum): tp x pp
  // for dense parameters, etp x ep x pp for expert ones.
  ProcessGroup& gradient_model_group(bool expert) const {
    return expert ? expert_tensor_model_pipeline_group() : model_parallel_group();
  }

  bool is_first_pipeline_stage() const { return coords_.pp == 0; }
  bool is_last_pipeline_stage() const { return coords_.pp == layout_.pipeline_model_parallel_size - 1; }

  // Collective over the world: replaces every group this rank belongs to by `wrap(group)`, kind by kind
  // in GroupKind order (the same on every rank; each call may communicate within its group only), e.g.
  // the device communication of a run on GPUs (comm/cuda/nccl_process_group.h). Before anything holds
  // a reference to a group.
  void wrap_groups(const std::function<std::unique_ptr<ProcessGroup>(std::unique_ptr<ProcessGroup>)>& wrap);

  // "rank 5 -> tp 1, dp 0, pp 1" and one line per group kind, for the start-up log.
  std::string describe() const;

 private:
  ParallelState() = default;
  ProcessGroup& group(GroupKind kind) const { return *groups_[static_cast<int>(kind)]; }
  ParallelLayout layout_;
  RankCoordinates coords_;
  int world_rank_ = 0;
  std::vector<std::unique_ptr<ProcessGroup>> groups_;  // by GroupKind
};

}  // namespace tessera::comm
