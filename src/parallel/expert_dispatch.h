// Carrying routed token rows to the ranks that hold their experts and back (Megatron-Core's token
// dispatchers), for a mixture-of-experts layer under expert parallelism (ep ranks each holding
// E / ep consecutive experts) and expert tensor parallelism (etp ranks each holding a slice of every
// local expert's MLP).
//
// A rank's routed rows are expert-major (model/moe_layer.h). dispatch() delivers to each rank the rows
// of its local experts from every rank whose tokens they are, local expert by local expert; the etp
// ranks of an expert all receive the same rows. combine() is its exact reverse and sums the etp
// ranks' partial outputs, so each row returns to where it came from as the whole expert output.
// Each is the other's backward: combine's sum is the adjoint of dispatch's copies to the etp ranks.
//   alltoall:  counts all-gathered over ep; a variable all-to-all over ep; a variable all-gather over
//              etp; the received chunks regrouped from [etp rank][ep rank][expert] to
//              [expert][etp rank][ep rank]. combine: the reverse, with a reduce-scatter over etp.
//   allgather: every rank's rows all-gathered over etp x ep, each rank keeping its local experts'
//              chunks; combine: the outputs put back in place and reduce-scattered over etp x ep.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/process_group.h"

namespace tessera::parallel {

enum class TokenDispatcher { AllToAll, AllGather };  // --moe-token-dispatcher-type

// The groups an MoE layer's experts are split over (comm::ParallelState's expert groups).
struct ExpertParallelContext {
  comm::ProcessGroup* expert_model = nullptr;         // ep
  comm::ProcessGroup* expert_tensor = nullptr;        // etp
  comm::ProcessGroup* expert_tensor_model = nullptr;  // etp x ep (the allgather dispatcher's group)
  TokenDispatcher dispatcher = TokenDispatcher::AllToAll;

  int ep_size() const { return expert_model->size(); }
  int ep_rank() const { return expert_model->rank(); }
  // One rank: every expert whole on it, valid for the life of the program.
  static const ExpertParallelContext& single_process();
};

// One layer's exchange for one micro-batch, planned from the rows this rank routes to each expert.
class ExpertDispatch {
 public:
  // counts [E]: this rank's rows of each expert (E divisible by the ep size). Collective over the
  // dispatcher's groups (it exchanges the counts).
  ExpertDispatch(const ExpertParallelContext& ep, const std::vector<int64_t>& counts);

  int64_t first_local_expert() const { return first_local_; }
  // Rows each local expert receives (the blocks of dispatch()'s result, in order).
  const std::vector<int64_t>& local_expert_rows() const { return local_rows_; }

  // rows [R, h] (this rank's, expert-major) -> [sum of local_expert_rows(), h].
  Tensor dispatch(const Tensor& rows) const;
  // expert_rows [sum of local_expert_rows(), h], this rank's partial outputs -> [R, h], each row the sum
  // over the etp ranks of its expert.
  Tensor combine(const Tensor& expert_rows) const;

 private:
  const ExpertParallelContext& ep_;
  int64_t first_local_ = 0;
  std::vector<int64_t> local_rows_;
  // alltoall: rows to and from each ep rank; rows each etp rank holds after the all-to-all; the
  // received chunks' rows in [etp][ep][expert] order and where each goes in [expert][etp][ep] order.
  // allgather: rows of each member of etp x ep, and the chunks in [member][expert] order.
  std::vector<int64_t> send_rows_, recv_rows_, gathered_rows_, chunk_rows_, chunk_order_;
  int64_t total_rows_ = 0;        // rows this rank routes
};

}  // namespace tessera::parallel
