// The rules of the optimizer: AdamW's hyper-parameters, the learning-rate schedule, and mixed
// precision, whose loss scaling the optimizer step undoes.
#include <utility>

#include "train/args/argument_rules.h"
#include "train/args/arguments.h"

namespace tessera::train {

using rules::require;
using rules::require_positive;

namespace {

// Megatron's rules: constant takes --weight-decay and neither end value; linear and cosine take both.
void finalize_weight_decay_schedule(TrainArguments& a) {
  const std::string& style = a.weight_decay_incr_style;
  require(style == "constant" || style == "linear" || style == "cosine", "--weight-decay-incr-style", style,
          "must be constant, linear or cosine");
  optim::WeightDecaySchedule& s = a.weight_decay_schedule;
  s.incr_steps = static_cast<double>(a.train_samples > 0 ? a.train_samples : a.train_iters);
  if (style == "constant") {
    for (const auto& [flag, value] : {std::pair{"--start-weight-decay", a.start_weight_decay},
                                      std::pair{"--end-weight-decay", a.end_weight_decay}})
      require(value < 0, flag, value, "needs --weight-decay-incr-style linear or cosine (constant: --weight-decay)");
    s.start = s.end = a.weight_decay;
    return;
  }
  for (const auto& [flag, value] : {std::pair{"--start-weight-decay", a.start_weight_decay},
                                    std::pair{"--end-weight-decay", a.end_weight_decay}})
    require(value >= 0, flag, value < 0 ? "(not given)" : str_cat(value),
            str_cat("must be >= 0: --weight-decay-incr-style ", style, " needs both ends"));
  s.start = a.start_weight_decay;
  s.end = a.end_weight_decay;
  s.style = optim::parse_lr_decay_style(style);
  a.weight_decay = s.start;  // the first step's
}

}  // namespace

void finalize_optimizer(TrainArguments& a) {
  rules::require_positive_finite("--lr", a.lr);
  require(a.min_lr >= 0 && a.min_lr <= a.lr, "--min-lr", a.min_lr, str_cat("must be in [0, --lr=", a.lr, "]"));
  require(a.weight_decay >= 0, "--weight-decay", a.weight_decay, "must be >= 0");
  require(std::isfinite(a.weight_decay), "--weight-decay", a.weight_decay, "must be a finite number");
  require(a.adam_beta1 >= 0 && a.adam_beta1 < 1, "--adam-beta1", a.adam_beta1, "must be in [0, 1)");
  require(a.adam_beta2 >= 0 && a.adam_beta2 < 1, "--adam-beta2", a.adam_beta2, "must be in [0, 1)");
  rules::require_positive_finite("--adam-eps", a.adam_eps);
  require(a.clip_grad >= 0, "--clip-grad", a.clip_grad, "must be >= 0");
  if (a.lr_warmup_fraction >= 0)
    require(a.lr_warmup_fraction <= 1, "--lr-warmup-fraction", a.lr_warmup_fraction, "must be in [0, 1]");
  const optim::LrDecayStyle style = optim::parse_lr_decay_style(a.lr_decay_style);
  if (a.train_samples == 0) {  // the schedule in iterations
    if (a.lr_decay_iters == 0) a.lr_decay_iters = a.train_iters;
    require_positive("--lr-decay-iters", a.lr_decay_iters);
    require(a.lr_warmup_iters >= 0, "--lr-warmup-iters", a.lr_warmup_iters, "must be >= 0");
    if (a.lr_warmup_fraction >= 0) {
      require(a.lr_warmup_iters == 0, "--lr-warmup-fraction", a.lr_warmup_fraction,
              "cannot be combined with --lr-warmup-iters");
      a.lr_warmup_iters = static_cast<int64_t>(a.lr_warmup_fraction * static_cast<double>(a.lr_decay_iters));
    }
    require(a.lr_warmup_iters < a.lr_decay_iters || a.lr_decay_style == "constant", "--lr-warmup-iters",
            a.lr_warmup_iters, str_cat("must be less than --lr-decay-iters=", a.lr_decay_iters));
    a.lr_schedule = {a.lr, a.min_lr, static_cast<double>(a.lr_warmup_iters), static_cast<double>(a.lr_decay_iters),
                     style};
  } else {  // in samples, as Megatron's (the fraction of the decay samples not rounded)
    if (a.lr_decay_samples == 0) a.lr_decay_samples = a.train_samples;
    require_positive("--lr-decay-samples", a.lr_decay_samples);
    require(a.lr_warmup_samples >= 0, "--lr-warmup-samples", a.lr_warmup_samples, "must be >= 0");
    double warmup = static_cast<double>(a.lr_warmup_samples);
    if (a.lr_warmup_fraction >= 0) {
      require(a.lr_warmup_samples == 0, "--lr-warmup-fraction", a.lr_warmup_fraction,
              "cannot be combined with --lr-warmup-samples");
      warmup = a.lr_warmup_fraction * static_cast<double>(a.lr_decay_samples);
    }
    require(warmup < static_cast<double>(a.lr_decay_samples) || a.lr_decay_style == "constant",
            "--lr-warmup-samples", warmup, str_cat("must be less than --lr-decay-samples=", a.lr_decay_samples));
    a.lr_schedule = {a.lr, a.min_lr, warmup, static_cast<double>(a.lr_decay_samples), style};
  }
  require(a.lr_warmup_init >= 0 && a.lr_warmup_init <= a.lr, "--lr-warmup-init", a.lr_warmup_init,
          str_cat("must be in [0, --lr=", a.lr, "]"));
  a.lr_schedule.init_lr = a.lr_warmup_init;
  finalize_weight_decay_schedule(a);
  a.adam = {a.weight_decay, a.adam_beta1, a.adam_beta2, a.adam_eps, a.clip_grad};

  // Mixed precision.
  require(!(a.bf16 && a.fp16), "--bf16", "true", "cannot be combined with --fp16");
  require(a.loss_scale >= 0, "--loss-scale", a.loss_scale, "must be >= 0 (0: dynamic)");
  require(a.loss_scale == 0 || a.bf16 || a.fp16, "--loss-scale", a.loss_scale, "needs --fp16 or --bf16");
  require(a.initial_loss_scale > 0, "--initial-loss-scale", a.initial_loss_scale, "must be positive");
  require(a.min_loss_scale > 0 && a.min_loss_scale <= a.initial_loss_scale, "--min-loss-scale", a.min_loss_scale,
          str_cat("must be in (0, --initial-loss-scale=", a.initial_loss_scale, "]"));
  require_positive("--loss-scale-window", a.loss_scale_window);
  require_positive("--hysteresis", a.hysteresis);
  a.model.params_dtype = a.bf16 ? DType::BF16 : a.fp16 ? DType::F16 : DType::F32;
  if (a.loss_scale > 0)
    a.loss_scaler = optim::LossScalerConfig{false, a.loss_scale, a.loss_scale, 1, 1};
  else if (a.fp16)
    a.loss_scaler = optim::LossScalerConfig{true, a.initial_loss_scale, a.min_loss_scale, a.loss_scale_window,
                                            a.hysteresis};
  else
    a.loss_scaler.reset();
}

}  // namespace tessera::train
