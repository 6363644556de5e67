#include "train/expert_load.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tessera::train {

ExpertLoad expert_load(const model::MoeConfig& moe, const model::LossSums::Routing& routing) {
  ExpertLoad load;
  load.min = std::numeric_limits<double>::infinity();
  int64_t layers = 0;
  for (int64_t layer = 1; layer <= static_cast<int64_t>(moe.layer_experts.size()); ++layer) {
    const int64_t experts = moe.experts(layer), first = moe.expert_offset(layer);
    if (experts == 0 || first + experts > static_cast<int64_t>(routing.routed.size())) continue;
    double total = 0;
    for (int64_t e = 0; e < experts; ++e) total += routing.routed[first + e];
    if (total <= 0) continue;
    const double share = total / static_cast<double>(experts);
    double variance = 0;
    for (int64_t e = 0; e < experts; ++e) {
      const double ratio = routing.routed[first + e] / share;
      load.min = std::min(load.min, ratio);
      load.max = std::max(load.max, ratio);
      variance += (ratio - 1) * (ratio - 1);
    }
    load.cv += std::sqrt(variance / static_cast<double>(experts));
    ++layers;
  }
  if (layers == 0) return ExpertLoad{};
  load.cv /= static_cast<double>(layers);
  load.dropped = routing.entries > 0 ? routing.dropped / routing.entries : 0;
  return load;
}

}  // namespace tessera::train
