// The rules of the training loop: how long it runs and how often it evaluates, logs and samples.
#include "train/argument_rules.h"
#include "train/arguments.h"

namespace tessera::train {

using rules::require;
using rules::require_positive;

void finalize_training_loop(TrainArguments& a) {
  require_positive("--train-iters", a.train_iters);
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
