// The rules of the optimizer: AdamW's hyper-parameters, the learning-rate schedule, and mixed
// precision, whose loss scaling the optimizer step undoes.
#include "train/argument_rules.h"
#include "train/arguments.h"

namespace tessera::train {

using rules::require;
using rules::require_positive;

void finalize_optimizer(TrainArguments& a) {
  rules::require_positive_finite("--lr", a.lr);
  require(a.min_lr >= 0 && a.min_lr <= a.lr, "--min-lr", a.min_lr, str_cat("must be in [0, --lr=", a.lr, "]"));
  require(a.weight_decay >= 0, "--weight-decay", a.weight_decay, "must be >= 0");
  require(std::isfinite(a.weight_decay), "--weight-decay", a.weight_decay, "must be a finite number");
  require(a.adam_beta1 >= 0 && a.adam_beta1 < 1, "--adam-beta1", a.adam_beta1, "must be in [0, 1)");
  require(a.adam_beta2 >= 0 && a.adam_beta2 < 1, "--adam-beta2", a.adam_beta2, "must be in [0, 1)");
  rules::require_positive_finite("--adam-eps", a.adam_eps);
  require(a.clip_grad >= 0, "--clip-grad", a.clip_grad, "must be >= 0");
  if (a.lr_decay_iters == 0) a.lr_decay_iters = a.train_iters;
  require_positive("--lr-decay-iters", a.lr_decay_iters);
  require(a.lr_warmup_iters >= 0, "--lr-warmup-iters", a.lr_warmup_iters, "must be >= 0");
  if (a.lr_warmup_fraction >= 0) {
    require(a.lr_warmup_iters == 0, "--lr-warmup-fraction", a.lr_warmup_fraction,
            "cannot be combined with --lr-warmup-iters");
    require(a.lr_warmup_fraction <= 1, "--lr-warmup-fraction", a.lr_warmup_fraction, "must be in [0, 1]");
    a.lr_warmup_iters = static_cast<int64_t>(a.lr_warmup_fraction * static_cast<double>(a.lr_decay_iters));
  }
  require(a.lr_warmup_iters < a.lr_decay_iters || a.lr_decay_style == "constant", "--lr-warmup-iters",
          a.lr_warmup_iters, str_cat("must be less than --lr-decay-iters=", a.lr_decay_iters));
  a.lr_schedule = {a.lr, a.min_lr, a.lr_warmup_iters, a.lr_decay_iters, optim::parse_lr_decay_style(a.lr_decay_style)};
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
