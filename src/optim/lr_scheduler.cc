#include "optim/lr_scheduler.h"

#include <cmath>

#include "core/check.h"

namespace tessera::optim {

LrDecayStyle parse_lr_decay_style(const std::string& name) {
  if (name == "constant") return LrDecayStyle::Constant;
  if (name == "linear") return LrDecayStyle::Linear;
  if (name == "cosine") return LrDecayStyle::Cosine;
  throw Error(str_cat("--lr-decay-style: '", name, "' is not one of constant, linear, cosine"));
}

float LrSchedule::lr(int64_t steps) const {
  if (warmup_steps > 0 && steps <= warmup_steps)
    return init_lr + (max_lr - init_lr) * static_cast<float>(static_cast<double>(steps) / warmup_steps);
  if (style == LrDecayStyle::Constant) return max_lr;
  if (steps > decay_steps) return min_lr;
  double ratio = (static_cast<double>(steps) - warmup_steps) / (decay_steps - warmup_steps);
  double coeff = style == LrDecayStyle::Linear ? 1.0 - ratio : 0.5 * (std::cos(M_PI * ratio) + 1.0);
  return static_cast<float>(min_lr + coeff * (max_lr - min_lr));
}

float WeightDecaySchedule::wd(int64_t steps) const {
  if (!varies() || static_cast<double>(steps) > incr_steps) return end;
  const double ratio = static_cast<double>(steps) / incr_steps;
  const double coeff = style == LrDecayStyle::Linear ? ratio : 0.5 * (std::cos(M_PI * (1.0 - ratio)) + 1.0);
  return static_cast<float>(start + coeff * (end - start));
}

}  // namespace tessera::optim
