// DeepSeek-V3's aux-loss-free load balancing (Wang et al., arXiv:2408.15664; Megatron-Core's
// get_updated_expert_bias, called from finalize_model_grads): once per global batch, each MoE layer's
// expert bias moves by
//   bias_e += rate * sign(mean_count - count_e)
// where count_e is the routing entries expert e kept over the whole global batch (every micro-batch,
// summed over the tensor x data x context parallel ranks of the stage: every token the layer routed)
// and mean_count their mean over the layer's experts. An under-loaded expert's bias rises, so it is
// chosen more often; the bias changes which experts are chosen, never their weights (kernels/
// moe_routing.h). The bias is a parameter the optimizer leaves alone (ParameterSpec::expert_bias_offset),
// so it is saved, resharded and loaded with the rest.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/process_group.h"
#include "model/parameters.h"

namespace tessera::train {

// One layer's step from its experts' counts over the global batch: rate * sign(mean - count_e), the
// sign taken exactly (as sign(sum - E * count_e) in integers), so an expert at the mean does not move.
std::vector<float> expert_bias_step(const std::vector<int64_t>& counts, float rate);

// Sums this rank's kept counts of the global batch (LossSums::Routing::kept, every MoE layer's experts
// in layer order, `total_experts` of them) over each of `groups` in turn, and adds each expert bias of
// params (those with an expert_bias_offset) its step. Every rank of the groups calls it with the same
// total_experts; the sums are exact (int64).
void update_expert_biases(model::ParameterSet& params, const std::vector<double>& kept, int64_t total_experts,
                          const std::vector<comm::ProcessGroup*>& groups, float rate);

}  // namespace tessera::train
