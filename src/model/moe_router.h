// Megatron-Core's TopKRouter on one rank: the gating GEMM (router.weight [E, h], fp32), optional input
// jitter, top-k routing (group-limited, and with the expert bias router.expert_bias [E] of
// aux-loss-free balancing, replicated like router.weight and moved by the trainer), and the
// load-balancing and z-losses, which it adds to the forward's losses and
// seeds in backward. Under sequence parallelism each tensor rank routes its own sequence shard, and under
// context parallelism each context rank its two chunks of every sequence; the losses' token counts are
// summed over those ranks (Megatron's TP x CP group) and the token totals are the whole sequence's, so
// the ranks' shares add up to the loss of the whole sequence, as one process computes it. (Without
// sequence parallelism every tensor rank routes the same tokens alike.)
#pragma once

#include "model/sublayer.h"

namespace tessera::model {

struct RouterRecord final : SavedTensors {
  Tensor jittered;  // the router's input when jittered (else the layer's input is)
  Tensor logits;    // [T, E]
  Tensor indices;   // int32 [T, k]
  Tensor probs;     // [T, k]
  Tensor counts;    // [groups, E]: the load-balancing loss's routed tokens, summed over the ranks of the
                    // sequences (the tensor group under sequence parallelism, the context group)
  void visit(const std::function<void(Tensor&, bool)>& f) override;
};

class TopkRouter {
 public:
  TopkRouter(const ModelConfig& config, int64_t layer_number, int64_t experts, const std::string& prefix,
             ParameterSet& params, const parallel::TensorParallelContext& tp);

  // x [T, h] -> rec.indices, rec.probs; adds the auxiliary losses to sc.ctx.losses (when set).
  void forward(const Tensor& x, const SublayerContext& sc, RouterRecord& rec) const;
  // dprobs [T, k] (the gradient of the objective) -> adds the input gradient into dx [T, h], the aux
  // and z-losses' included; accumulates router.weight's gradient.
  void backward(const Tensor& dprobs, const Tensor& x, const SublayerContext& sc, RouterRecord& rec,
                const Tensor& dx) const;

  int64_t experts() const { return experts_; }

 private:
  // What one micro-batch's losses weigh in the trainer's sums: the global batch's loss tokens per
  // micro-batch and data-parallel rank, so that the trainer's division by loss tokens gives the mean
  // over micro-batches of each micro-batch's loss (Megatron's scale 1 / num_microbatches).
  static double micro_batch_weight(const ForwardContext& ctx) { return ctx.per_sample_loss_weight * ctx.batch; }
  int64_t groups(const ForwardContext& ctx) const;           // 1, or the sequences (seq_aux_loss)
  int64_t tokens_per_group(const ForwardContext& ctx) const;  // over the tensor and context groups
  // y = x times the input jitter, keyed by the global rows of the tokens this rank holds. y may be x.
  void jitter(const Tensor& x, const Tensor& y, const ForwardContext& ctx) const;

  const ModelConfig& config_;
  int64_t layer_number_, experts_;
  const parallel::TensorParallelContext& tp_;
  Parameter* weight_;
  Parameter* expert_bias_ = nullptr;  // --moe-router-enable-expert-bias: [E], not trained
};

}  // namespace tessera::model
