// Megatron's OptimizerParamScheduler for the learning rate: linear warm-up from 0, then constant,
// linear or cosine decay to --min-lr at --lr-decay-iters (or --lr-decay-samples), and --min-lr after that.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::optim {

enum class LrDecayStyle { Constant, Linear, Cosine };

LrDecayStyle parse_lr_decay_style(const std::string& name);  // throws on an unknown name

struct LrSchedule {
  float max_lr = 0, min_lr = 0;
  // Steps: iterations, or samples under --train-samples. Doubles, as Megatron's: a warm-up given as a
  // fraction of the decay samples is not rounded there.
  double warmup_steps = 0, decay_steps = 0;
  LrDecayStyle style = LrDecayStyle::Linear;

  // The learning rate after `steps` steps of the schedule (the lr the next update trains with).
  float lr(int64_t steps) const;
};

}  // namespace tessera::optim
