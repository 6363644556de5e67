#include "plan/ouroboros.h"

#include <algorithm>

#include "core/check.h"
#include "plan/memory_model.h"
#include "plan/time_model.h"

namespace tessera::plan {

OuroborosPlan plan_ouroboros(const model::ModelConfig& c, const Layout& l, const DeviceSpec& d) {
  const int K = l.pp + 1, P = l.pp;
  TESSERA_CHECK(P >= 1 && l.virtual_stages == 1 && c.num_layers % K == 0, "Ouroboros on pp ", P, ": --num-layers=",
                c.num_layers, " must be a multiple of K = pp + 1 = ", K, " modules (and v = 1)");
  // The modules are the stages of a K-stage split: the embedding on the first, the head on the last.
  Layout split = l;
  split.pp = K;
  const PipelineCosts costs = pipeline_costs(c, split, d);
  const double m = static_cast<double>(l.micro_batches());
  auto rank_of = [&](int module) { return module == K - 1 ? 0 : module; };

  OuroborosPlan p;
  p.modules = K;
  p.rank_backward.assign(P, 0);
  p.rank_optimizer.assign(P, 0);
  p.weight_copy_bytes.assign(P, 0);
  p.activation_copy_bytes.assign(P, 0);
  for (int k = 0; k < K; ++k) {
    p.module_forward.push_back(m * (costs.forward_compute[k][0] + costs.forward_comm[k][0]));
    p.module_backward.push_back(m * (costs.backward_compute[k][0] + costs.backward_comm[k][0]));
    p.forward_chain += p.module_forward[k] + (k + 1 < K ? m * (costs.p2p_transfer + costs.p2p_local) : 0);
    const int r = rank_of(k);
    p.rank_backward[r] += p.module_backward[k];
    p.rank_optimizer[r] += optimizer_seconds(c, split, d, k);
    // Module k's delay is K - 1 - k iterations: as many earlier weight versions (fp32, as the schedule
    // runs), and as many more mini-batches' activations held for their late backward.
    const double delay = K - 1 - k;
    p.weight_copy_bytes[r] += delay * stage_parameters(c, split, k).total() * 4;
    double activations = 0;
    for (int64_t layer : chunk_layer_numbers(c, split, k, 0)) activations += layer_activation_bytes(c, split, layer);
    p.activation_copy_bytes[r] += delay * m * activations;
  }
  p.error_gradients = m * costs.p2p_transfer;
  double slowest = 0;
  for (int r = 0; r < P; ++r) slowest = std::max(slowest, p.rank_backward[r] + p.rank_optimizer[r]);
  p.iteration = p.forward_chain + p.error_gradients + slowest;
  for (int r = 0; r < P; ++r) {
    double own = p.rank_backward[r] + p.rank_optimizer[r];
    for (int k = 0; k < K; ++k)
      if (rank_of(k) == r) own += p.module_forward[k];
    p.rank_idle.push_back(p.iteration - own);
  }
  return p;
}

}  // namespace tessera::plan
