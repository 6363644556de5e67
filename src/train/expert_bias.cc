#include "train/expert_bias.h"

#include <cmath>

#include "core/check.h"
#include "kernels/elementwise.h"
#include "kernels/tensor_ops.h"

namespace tessera::train {

std::vector<float> expert_bias_step(const std::vector<int64_t>& counts, float rate) {
  const int64_t experts = static_cast<int64_t>(counts.size());
  int64_t sum = 0;
  for (int64_t c : counts) sum += c;
  std::vector<float> step(counts.size());
  for (size_t e = 0; e < counts.size(); ++e) {
    const int64_t offset = sum - experts * counts[e];  // E * (mean - count_e)
    step[e] = offset > 0 ? rate : offset < 0 ? -rate : 0.0f;
  }
  return step;
}

void update_expert_biases(model::ParameterSet& params, const std::vector<double>& kept, int64_t total_experts,
                          const std::vector<comm::ProcessGroup*>& groups, float rate) {
  TESSERA_CHECK(static_cast<int64_t>(kept.size()) <= total_experts, "update_expert_biases: ", kept.size(),
                " counts for ", total_experts, " experts");
  Tensor counts = Tensor::zeros({total_experts}, DType::I64, Device::cpu());
  for (size_t i = 0; i < kept.size(); ++i) counts.host_i64()[i] = std::llround(kept[i]);
  // Reduced where the parameters live (an NCCL group takes only its GPU's memory; a staged one either).
  const Device device = params.params().empty() ? Device::cpu() : params.params().front().value.device();
  Tensor reduced = kernels::to_device(counts, device);
  for (comm::ProcessGroup* g : groups)
    if (g && g->size() > 1) g->all_reduce(reduced);
  counts = kernels::to_device(reduced, Device::cpu());
  for (model::Parameter& p : params.params()) {
    if (p.spec.trained()) continue;
    const int64_t first = p.spec.expert_bias_offset, experts = p.value.numel();
    TESSERA_CHECK(first + experts <= total_experts, p.spec.name, ": experts [", first, ", ", first + experts,
                  ") outside the ", total_experts, " routing counts");
    const std::vector<int64_t> layer(counts.host_i64() + first, counts.host_i64() + first + experts);
    const std::vector<float> step = expert_bias_step(layer, rate);
    Tensor delta = Tensor::empty({experts}, DType::F32, Device::cpu());
    std::copy(step.begin(), step.end(), delta.host_f32());
    kernels::add_into(p.value, kernels::to_device(delta, p.value.device()));
  }
}

}  // namespace tessera::train
