// The mixture-of-experts hyper-parameters of a model (Megatron-Core's --num-experts and --moe-* flags,
// DeepSpeed-MoE's pyramid and residual forms), a part of ModelConfig.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/moe_routing.h"

namespace tessera::model {

enum class LoadBalancing { AuxLoss, SeqAuxLoss, None };  // --moe-router-load-balancing-type

struct MoeConfig {
  // The experts of each layer, layer_experts[layer_number - 1]; 0: a dense MLP. Empty: a dense model.
  // A pyramid (PR-MoE) has more experts in later layers. With multi-token prediction the modules' layers
  // follow as layers num_layers + 1, ..., each with the last layer's experts (Megatron's MTP spec).
  std::vector<int64_t> layer_experts;
  int64_t ffn_hidden_size = 0;      // --moe-ffn-hidden-size: each expert's MLP width
  // --moe-router-topk, -score-function, -pre-softmax, -topk-scaling-factor, -num-groups, -group-topk
  kernels::TopkRouterOptions router;
  // --moe-router-enable-expert-bias: DeepSeek-V3's aux-loss-free balancing. Each MoE layer's router holds
  // router.expert_bias [E], added to the sigmoid scores for choosing the experts only, and moved by the
  // trainer after each global batch (--moe-router-bias-update-rate, train/expert_bias.h).
  bool expert_bias = false;
  LoadBalancing load_balancing = LoadBalancing::AuxLoss;
  float aux_loss_coeff = 0.0f;      // --moe-aux-loss-coeff
  float z_loss_coeff = 0.0f;        // --moe-z-loss-coeff (0: none)
  float input_jitter_eps = 0.0f;    // --moe-input-jitter-eps (0: none)
  double capacity_factor = -1.0;    // --moe-expert-capacity-factor (< 0: dropless)
  kernels::TokenDropPolicy token_drop_policy = kernels::TokenDropPolicy::Probs;
  bool pad_expert_input_to_capacity = false;
  int64_t shared_expert_intermediate_size = 0;  // --moe-shared-expert-intermediate-size (0: none)
  // DeepSpeed-MoE's residual MoE (--mlp-type residual): y = moe(x) c0 + mlp(x) c1 with
  // c = softmax(coefficient(x)), a learned two-way mix of the experts and a dense MLP.
  bool residual = false;
  // --moe-grouped-gemm: each rank's local experts run as one batched product per linear layer
  // (model/grouped_mlp.h). How the experts are multiplied, not what they are: not in the saved config.
  bool grouped_gemm = false;

  bool enabled() const { return !layer_experts.empty(); }
  // Experts of 1-based layer `layer_number`, 0 for a dense one.
  int64_t experts(int64_t layer_number) const {
    return enabled() ? layer_experts.at(static_cast<size_t>(layer_number - 1)) : 0;
  }
  int64_t num_moe_layers() const;
  // Every expert of every MoE layer, in layer order; and where layer `layer_number`'s first one is.
  int64_t total_experts() const;
  int64_t expert_offset(int64_t layer_number) const;
  bool dropless() const { return capacity_factor < 0; }
};

// The names of the losses an MoE model logs (Megatron's "load_balancing_loss", "z_loss"), in order.
std::vector<std::string> moe_loss_names(const MoeConfig& m);

}  // namespace tessera::model
