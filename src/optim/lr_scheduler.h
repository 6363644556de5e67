// Megatron's OptimizerParamScheduler: the learning rate (linear warm-up from --lr-warmup-init, then
// constant, linear or cosine decay to --min-lr at --lr-decay-iters (or --lr-decay-samples), and --min-lr
// after that) and the weight decay (from --start-weight-decay to --end-weight-decay).
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
  float init_lr = 0;  // where the warm-up starts (--lr-warmup-init)

  // The learning rate after `steps` steps of the schedule (the lr the next update trains with).
  float lr(int64_t steps) const;
};

// --weight-decay-incr-style constant|linear|cosine: the weight decay goes from start to end over
// incr_steps steps (those of the learning rate: iterations, or samples), then stays at end.
struct WeightDecaySchedule {
  float start = 0, end = 0;
  double incr_steps = 0;
  LrDecayStyle style = LrDecayStyle::Constant;  // linear or cosine: an increase

  bool varies() const { return style != LrDecayStyle::Constant; }
  float wd(int64_t steps) const;
};

}  // namespace tessera::optim
