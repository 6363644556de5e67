// A mixture-of-experts feed-forward slot (Megatron-Core's MoELayer on one rank, DeepSpeed-MoE's
// residual form): the router picks each token's top-k experts, the token dispatcher carries the routed
// rows to the ranks holding those experts (parallel/expert_dispatch.h), each local expert (an Mlp over
// the expert tensor group) runs on its rows, and the outputs come back to be summed per token with
// their routing probabilities:
//   y_t = sum_{e in topk(t)} p_te expert_e(x_t)   (+ shared_expert(x_t))
// and with residual MoE, y = moe(x) c0 + mlp(x) c1, c = softmax(coefficient(x)).
// Rows are routed expert-major (expert 0's first), tokens ascending within an expert.
// Parameters (global expert index g = ep_rank * local experts + j, so a name means one tensor in any
// layout): router.weight, experts.local_experts.<g>.linear_fc1/linear_fc2, shared_experts.*,
// and for residual MoE residual_mlp.* and coefficient.*. With --moe-grouped-gemm the local experts
// run together (model/grouped_mlp.h), on the same parameters.
#pragma once

#include <memory>
#include <vector>

#include "model/grouped_mlp.h"
#include "model/mlp.h"
#include "model/moe_router.h"
#include "parallel/expert_dispatch.h"

namespace tessera::model {

class MoeLayer final : public Sublayer {
 public:
  MoeLayer(const ModelConfig& config, int64_t layer_number, const std::string& prefix, ParameterSet& params,
           const parallel::TensorParallelContext& tp);

  std::unique_ptr<SavedTensors> make_record() const override;
  Tensor forward(const Tensor& x, bool x_rounded, const SublayerContext& sc, SavedTensors& rec) const override;
  Tensor backward(const Tensor& dy, const Tensor& x, bool x_rounded, const SublayerContext& sc, SavedTensors& rec,
                  bool rec_rounded) const override;
  // Under expert parallelism every rank of the expert groups must decode the same tokens in step.
  Tensor decode(const Tensor& x, const DecodeLayout& layout, KvCache& cache) const override;

  int64_t local_experts() const { return static_cast<int64_t>(experts_.size()); }

 private:
  // Adds this rank's routing counts (LossSums::Routing) of the micro-batch.
  void count_routing(const kernels::ExpertRows& rows, int64_t capacity, LossSums& losses) const;

  const ModelConfig& config_;
  int64_t layer_number_;
  const parallel::ExpertParallelContext& ep_;
  // Each expert's MLP is split over the expert tensor group, its rows gathered by the dispatcher.
  parallel::TensorParallelContext expert_tp_;
  TopkRouter router_;
  std::vector<std::unique_ptr<Mlp>> experts_;
  std::unique_ptr<GroupedMlp> grouped_;  // --moe-grouped-gemm: the local experts' products batched
  std::unique_ptr<Mlp> shared_expert_, residual_mlp_;
  Parameter* coefficient_weight_ = nullptr;  // residual MoE: [2, h]
  Parameter* coefficient_bias_ = nullptr;    // [2]
};

// The feed-forward slot of a layer: an MoeLayer where config.moe gives the layer experts, else the
// dense Mlp.
std::unique_ptr<Sublayer> make_feed_forward(const ModelConfig& config, int64_t layer_number, const std::string& prefix,
                                            ParameterSet& params, const parallel::TensorParallelContext& tp);

}  // namespace tessera::model
