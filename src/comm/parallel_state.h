// Megatron's parallel_state: which ranks form the tensor, data, pipeline, model-parallel and embedding
// groups. Ranks are laid out in Megatron's order tp-cp-ep-dp-pp, tensor fastest:
//   world rank = tp_rank + tp * (dp_rank + dp * pp_rank)        (context and expert sizes are 1 today)
#pragma once

#include <memory>
#include <string>

#include "comm/process_group.h"

namespace tessera::comm {

struct ParallelLayout {
  int world_size = 1;
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  int data_parallel_size() const { return world_size / (tensor_model_parallel_size * pipeline_model_parallel_size); }
};

// Throws an Error naming the flags unless tp * pp divides the world size (and each is >= 1).
void validate_layout(const ParallelLayout& layout);

struct RankCoordinates {
  int tp = 0, dp = 0, pp = 0;
};
RankCoordinates coordinates_of(const ParallelLayout& layout, int world_rank);
int world_rank_of(const ParallelLayout& layout, RankCoordinates c);

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

  ProcessGroup& tensor_group() const { return *tensor_; }
  ProcessGroup& data_group() const { return *data_; }
  ProcessGroup& pipeline_group() const { return *pipeline_; }
  ProcessGroup& model_parallel_group() const { return *model_parallel_; }  // tp x pp ranks of one dp replica
  // First and last pipeline stages of this (tp, dp) position (null on other stages).
  ProcessGroup* embedding_group() const { return embedding_.get(); }

  bool is_first_pipeline_stage() const { return coords_.pp == 0; }
  bool is_last_pipeline_stage() const { return coords_.pp == layout_.pipeline_model_parallel_size - 1; }

  // "rank 5 -> tp 1, dp 0, pp 1" lines and one line per group kind, for the start-up log.
  std::string describe() const;

 private:
  ParallelState() = default;
  ParallelLayout layout_;
  RankCoordinates coords_;
  int world_rank_ = 0;
  std::unique_ptr<ProcessGroup> tensor_, data_, pipeline_, model_parallel_, embedding_;
};

}  // namespace tessera::comm
