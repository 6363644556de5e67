// How evenly the MoE layers spread their tokens over a logging interval, for the log line and
// TensorBoard: each expert's routed tokens as a multiple of an even share of its layer's, and the
// share of routing entries that the capacity dropped.
#pragma once

#include "model/language_model.h"
#include "model/moe_config.h"

namespace tessera::train {

struct ExpertLoad {
  double min = 0, max = 0;  // the least and most loaded expert of any MoE layer (1: an even share)
  double cv = 0;            // coefficient of variation over each layer's experts, averaged over the layers
  double dropped = 0;       // dropped routing entries / all routing entries
};

// From routing counts summed over every rank of the job (LossSums::Routing).
ExpertLoad expert_load(const model::MoeConfig& moe, const model::LossSums::Routing& routing);

}  // namespace tessera::train
