// Loss scaling for 16-bit training, as Megatron's ConstantGradScaler and DynamicGradScaler. The loss
// gradient is multiplied by the scale before backward, so that small gradients do not flush to zero in
// fp16, and the optimizer divides the gradients by it again. A step whose gradients overflowed (inf or
// NaN) is skipped; the dynamic scaler then halves the scale once `hysteresis` overflows have been seen
// since it last grew, never below the minimum, and doubles it after `window` steps without overflow.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

namespace tessera::optim {

struct LossScalerConfig {
  bool dynamic = true;
  float initial_scale = 4294967296.0f;  // 2^32, Megatron's --initial-loss-scale; the scale when constant
  float min_scale = 1.0f;
  int64_t window = 1000;   // --loss-scale-window: clean steps before the scale doubles
  int64_t hysteresis = 2;  // overflows tolerated before the scale halves
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config);

  float scale() const { return scale_; }
  // After each step; found_inf: the gradients held inf or NaN and the step was skipped.
  void update(bool found_inf);

  // The scale and the trackers, for checkpoints; load_state throws on a malformed object.
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

 private:
  LossScalerConfig config_;
  float scale_;
  int64_t growth_tracker_ = 0;      // steps since the last overflow or growth
  int64_t hysteresis_tracker_;      // overflows still tolerated before backing off
};

}  // namespace tessera::optim
