#include "optim/loss_scaler.h"

#include <algorithm>

#include "core/check.h"

namespace tessera::optim {

LossScaler::LossScaler(const LossScalerConfig& config)
    : config_(config), scale_(config.initial_scale), hysteresis_tracker_(config.hysteresis) {
  TESSERA_CHECK(config.initial_scale > 0 && config.min_scale > 0 && config.window > 0 && config.hysteresis > 0,
                "LossScaler: scales, window and hysteresis must be positive");
}

void LossScaler::update(bool found_inf) {
  if (!config_.dynamic) return;
  if (found_inf) {
    growth_tracker_ = 0;
    if (--hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * 0.5f, config_.min_scale);
    return;
  }
  if (++growth_tracker_ == config_.window) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = config_.hysteresis;
    scale_ *= 2.0f;
  }
}

nlohmann::json LossScaler::state() const {
  return {{"scale", scale_}, {"growth_tracker", growth_tracker_}, {"hysteresis_tracker", hysteresis_tracker_}};
}

void LossScaler::load_state(const nlohmann::json& state) {
  TESSERA_CHECK(state.is_object() && state.contains("scale") && state["scale"].is_number() &&
                    state["scale"].get<double>() > 0 && state.contains("growth_tracker") &&
                    state["growth_tracker"].is_number_integer() && state.contains("hysteresis_tracker") &&
                    state["hysteresis_tracker"].is_number_integer(),
                "loss scaler state ", state.dump(), " is malformed: expected a positive 'scale' and integer "
                "'growth_tracker' and 'hysteresis_tracker'");
  if (!config_.dynamic) return;  // a constant scale comes from the flags
  scale_ = state["scale"].get<float>();
  growth_tracker_ = state["growth_tracker"].get<int64_t>();
  hysteresis_tracker_ = state["hysteresis_tracker"].get<int64_t>();
}

}  // namespace tessera::optim
