// The rules of --pipeline-schedule ouroboros (issue 38, docs/ouroboros.md): Ouroboros' delayed-gradient
// model parallelism, K = pipeline size + 1 modules: in one process the emulation of train/ouroboros_driver
// (any K), on P > 1 pipeline ranks the same driver with each rank's modules, on T tensor ranks each and
// replicated over D data-parallel ranks; checkpoints hold its whole delayed state
// (train/ouroboros_checkpoint.cc). What it is not yet composed with is refused, naming the flag.
#include "train/args/argument_rules.h"
#include "train/args/arguments.h"

namespace tessera::train {

using rules::require;

void finalize_ouroboros(TrainArguments& a) {
  require(a.pipeline_schedule == "1f1b" || a.pipeline_schedule == "ouroboros", "--pipeline-schedule",
          a.pipeline_schedule, "must be 1f1b or ouroboros");
  if (a.pipeline_schedule != "ouroboros") {
    require(a.ouroboros_warmup_iters == 0, "--ouroboros-warmup-iters", a.ouroboros_warmup_iters,
            "needs --pipeline-schedule ouroboros");
    require(a.ouroboros_modules == 0, "--ouroboros-modules", a.ouroboros_modules,
            "needs --pipeline-schedule ouroboros");
    return;
  }
  const char* flag = "--pipeline-schedule";
  const int64_t pp = a.pipeline_model_parallel_size;
  require(a.ouroboros_warmup_iters >= 0, "--ouroboros-warmup-iters", a.ouroboros_warmup_iters, "must be >= 0");
  // K = P + 1 modules on P ranks; one process emulates any K (default 2, as on one pipeline rank).
  if (a.ouroboros_modules == 0) a.ouroboros_modules = pp + 1;
  require(a.ouroboros_modules >= 1, "--ouroboros-modules", a.ouroboros_modules, "must be positive");
  require(pp == 1 || a.ouroboros_modules == pp + 1, "--ouroboros-modules", a.ouroboros_modules,
          str_cat("must be --pipeline-model-parallel-size + 1 = ", pp + 1, " (the first and last module share rank 0)"));
  require(a.model.num_layers % a.ouroboros_modules == 0, "--num-layers", a.model.num_layers,
          str_cat("must be a multiple of the ", a.ouroboros_modules, " Ouroboros modules"));
  require(a.model.family == "gpt", flag, "ouroboros", str_cat("trains GPT models only, not --model-family ", a.model.family));
  require(!a.model.untie_embeddings_and_output_weights, flag, "ouroboros",
          "needs the input embedding tied to the output layer (the first and last modules share it): drop "
          "--untie-embeddings-and-output-weights");
  auto not_yet = [&](bool ok, const std::string& what) {
    require(ok, flag, "ouroboros", str_cat("cannot be combined with ", what, " yet (issue 38)"));
  };
  // On P > 1 ranks module k on rank k and module K-1 beside module 0; each module may be split over T
  // tensor ranks (without sequence parallelism: the activation between modules is whole on each), and
  // the whole ring replicated over D data-parallel ranks (world = P x T x D).
  not_yet(a.context_parallel_size == 1, "--context-parallel-size");
  not_yet(!a.sequence_parallel, "--sequence-parallel");
  // The replicas add their delayed gradients and each keeps whole moments (the driver's own AdamW).
  not_yet(!a.use_distributed_optimizer, "--use-distributed-optimizer");
  not_yet(a.virtual_pipeline_size == 1, "virtual pipeline stages (interleaving)");
  not_yet(a.token_slices.empty(), "--pipeline-token-slices");
  not_yet(!a.model.moe.enabled(), "mixture-of-experts layers (--num-experts)");
  not_yet(!a.kd, "--kd");
  not_yet(!a.bf16 && !a.fp16, a.bf16 ? "--bf16" : "--fp16");
  not_yet(a.recompute.method == model::RecomputeMethod::None, "--recompute-granularity full");
  // Checkpoints hold the whole delayed state (train/ouroboros_checkpoint.cc); a resumed run loads all of it.
  not_yet(a.load.empty() || (!a.finetune && !a.no_load_optim), "--finetune or --no-load-optim (a resumed Ouroboros "
          "run loads its whole state: weight versions, delayed gradients, moments)");
  not_yet(a.inject_nan_at_iterations.empty(), "injected NaN gradients");
  // A resumed run replays its pending mini-batches at --global-batch-size.
  not_yet(!a.batch_schedule.ramps(), a.step_batch_size_schedule.empty() ? "--rampup-batch-size" : "--step-batch-size-schedule");
  not_yet(!a.weight_decay_schedule.varies(), "--weight-decay-incr-style linear or cosine");
  not_yet(!a.log_params_norm, "--log-params-norm");
  not_yet(!a.no_save_optim, "--no-save-optim (its checkpoint is its whole delayed state)");
  not_yet(!a.layer_split.uneven(), "an uneven pipeline split (--decoder-first/last-pipeline-num-layers)");
  not_yet(!a.layer_split.accounts(),
          "--account-for-embedding-in-pipeline-split or --account-for-loss-in-pipeline-split (Ouroboros cuts the "
          "layers into its K modules itself)");
}

}  // namespace tessera::train
