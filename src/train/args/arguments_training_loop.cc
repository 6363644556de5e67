// The rules of the training loop: how long it runs and how often it evaluates, logs and samples.
#include "train/args/argument_rules.h"
#include "train/args/arguments.h"

namespace tessera::train {

using rules::require;
using rules::require_positive;

void finalize_training_loop(TrainArguments& a) {
  // Megatron's two ways to say how long: iterations, or samples (then the schedule is in samples too,
  // and only then may the global batch ramp up).
  if (a.train_samples == 0) {
    require_positive("--train-iters", a.train_iters);
    require(a.lr_decay_samples == 0, "--lr-decay-samples", a.lr_decay_samples,
            "is for --train-samples; with --train-iters use --lr-decay-iters");
    require(a.lr_warmup_samples == 0, "--lr-warmup-samples", a.lr_warmup_samples,
            "is for --train-samples; with --train-iters use --lr-warmup-iters");
    require(a.rampup_batch_size.empty(), "--rampup-batch-size", rampup_text(a),
            "needs --train-samples: Megatron ramps the batch size only in sample-based training");
    require(a.step_batch_size_schedule.empty(), "--step-batch-size-schedule", a.step_batch_size_schedule,
            "needs --train-samples: Tessera runs a batch-size schedule only in sample-based training (not yet with "
            "--train-iters)");
  } else {
    require_positive("--train-samples", a.train_samples);
    require(a.train_iters == 0, "--train-iters", a.train_iters, "cannot be combined with --train-samples");
    require(a.lr_decay_iters == 0, "--lr-decay-iters", a.lr_decay_iters,
            "is for --train-iters; with --train-samples use --lr-decay-samples");
    require(a.lr_warmup_iters == 0, "--lr-warmup-iters", a.lr_warmup_iters,
            "is for --train-iters; with --train-samples use --lr-warmup-samples");
    a.train_iters = a.batch_schedule.iterations_for(a.train_samples);
    require(a.train_iters > 0, "--train-samples", a.train_samples,
            str_cat("is less than one global batch of ", a.batch_schedule.at(0), " samples"));
  }
  require_positive("--eval-interval", a.eval_interval);
  require(a.eval_iters >= 0, "--eval-iters", a.eval_iters, "must be >= 0");
  require_positive("--log-interval", a.log_interval);
  require_positive("--max-nan-iterations", a.max_nan_iterations);
  require(a.sample_interval >= 0, "--sample-interval", a.sample_interval, "must be >= 0");
  require(a.sample_interval == 0 || !a.sample_prompt.empty(), "--sample-interval", a.sample_interval,
          "needs --sample-prompt TEXT");
  require(a.sample_interval == 0 || a.pipeline_model_parallel_size == 1, "--sample-interval", a.sample_interval,
          "is not supported with --pipeline-model-parallel-size > 1 yet");
}

}  // namespace tessera::train
