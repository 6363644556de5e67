// `tessera train`'s flags, and finalize(), which runs the rules of each concern (arguments_*.cc).
#include "train/args/arguments.h"

#include <CLI/CLI.hpp>

#include "data/blended_dataset.h"
#include "train/args/argument_rules.h"
#include "train/args/command_line_flags.h"
#include "train/args/megatron_compat_flags.h"
#include "train/args/megatron_refused_flags.h"

namespace tessera::train {
TrainArguments parse_train_arguments(const std::vector<std::string>& args, int64_t world_size) {
  return parse_train_arguments(args, world_size, TokenSliceCostModel{});
}

TrainArguments parse_train_arguments(const std::vector<std::string>& args, int64_t world_size,
                                     const TokenSliceCostModel& token_slice_cost_model) {
  TrainArguments a;
  a.world_size = world_size;
  a.token_slice_cost_model = token_slice_cost_model;
  CLI::App app{"tessera train: train a GPT (or, with --model-family bert, a BERT) with Megatron-LM's flags",
               "tessera train"};
  app.option_defaults()->always_capture_default();
  // As with argparse in Megatron, a flag given twice takes its last value, so scripts can append overrides
  // (list flags: keep_last_occurrence; single-valued ones: take_last_occurrence_of_scalars, before parsing).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto* m = app.add_option_group("model");
  add_model_flags(*m, a);
  // (--seq-length too, or Megatron's --encoder-seq-length: finalize_model.)
  for (const char* flag : {"--num-layers", "--hidden-size", "--num-attention-heads"}) m->get_option(flag)->required();
  m->add_option("--tensor-model-parallel-size", a.tensor_model_parallel_size, "Tensor-parallel size");
  m->add_option("--pipeline-model-parallel-size", a.pipeline_model_parallel_size, "Pipeline-parallel size");
  m->add_option("--context-parallel-size", a.context_parallel_size,
                "Context-parallel size: each sequence split over this many ranks (2 x cp load-balanced chunks), "
                "attention exchanging key/value blocks around their ring");
  // Several values are one option (argparse's nargs='+').
  keep_last_occurrence(m->add_option("--cp-comm-type", a.cp_comm_type,
                                     "Megatron's context-parallel communication: p2p (Tessera's ring attention), "
                                     "once or once per layer; a2a, allgather and a2a+p2p are not built (refused "
                                     "with --context-parallel-size > 1, no effect without)"));
  m->add_option("--num-layers-per-virtual-pipeline-stage", a.num_layers_per_virtual_pipeline_stage,
                "Layers per model chunk of the interleaved schedule");
  m->add_option("--num-virtual-stages-per-pipeline-rank", a.num_virtual_stages_per_pipeline_rank,
                "Model chunks per pipeline rank of the interleaved schedule");
  m->add_option("--decoder-first-pipeline-num-layers", a.decoder_first_pipeline_num_layers,
                "Layers of the first pipeline stage (uneven split; the rest evenly over the others)")
      ->default_str("");
  m->add_option("--decoder-last-pipeline-num-layers", a.decoder_last_pipeline_num_layers,
                "Layers of the last pipeline stage (uneven split; the rest evenly over the others)")
      ->default_str("");
  m->add_flag("--account-for-embedding-in-pipeline-split", a.account_for_embedding_in_pipeline_split,
              "Count the embedding as a layer when splitting the layers evenly over the pipeline stages (the first "
              "model chunk builds one layer fewer)");
  m->add_flag("--account-for-loss-in-pipeline-split", a.account_for_loss_in_pipeline_split,
              "Count the loss as a layer when splitting the layers evenly over the pipeline stages (the last model "
              "chunk builds one layer fewer)");
  m->add_option("--pipeline-token-slices", a.pipeline_token_slices,
                "TeraPipe's token slices: N equal slices, lengths l1,l2,... of the sequence, or auto (TeraPipe's "
                "dynamic program, from the calibration when there is one); each micro-batch runs slice by slice "
                "with per-layer key/value caches, pipelined across stages");
  m->add_option("--pipeline-schedule", a.pipeline_schedule,
                "1f1b (Megatron's; interleaved with virtual stages) or ouroboros (delayed gradients without backward "
                "locking, K = pipeline size + 1 modules, first and last on rank 0 sharing the tied embedding)");
  m->add_flag("--enable-zero-bubble", a.enable_zero_bubble,
              "Zero-bubble pipeline (ZB-H1): each backward split into B (input gradient) and W (weight gradients), "
              "W passes filling the bubble at 1F1B's peak memory");
  m->add_flag("--zero-bubble-v-schedule", a.zero_bubble_v_schedule,
              "ZB-V: two model chunks per rank in a V (rank r: chunks r and 2p-1-r), near-zero bubble at 1F1B's "
              "peak memory; implies --enable-zero-bubble");
  m->add_option("--zero-bubble-max-pending-backward", a.zero_bubble_max_pending_backward,
                "Zero bubble: most W passes a rank defers at once (0: bounded by memory only)");
  m->add_option("--zero-bubble-pipeline-timers-start-iter", a.zero_bubble_timers_start_iter,
                "Zero bubble: the iterations after this one time the F, B and W passes (default 100)");
  m->add_option("--zero-bubble-pipeline-timers-end-iter", a.zero_bubble_timers_end_iter,
                "Zero bubble: after this iteration the lists are rebuilt from the timed passes' mean costs "
                "(default 110)");
  m->add_option("--ouroboros-warmup-iters", a.ouroboros_warmup_iters,
                "Ouroboros: synchronous iterations (plain backpropagation) before the delayed gradients");
  m->add_option("--ouroboros-modules", a.ouroboros_modules,
                "Ouroboros: modules K (default pipeline size + 1; one process emulates any K)");
  add_expert_parallel_flags(*m, a);
  m->add_flag("--sequence-parallel", a.sequence_parallel, "Shard norms, dropout and residuals along the sequence");
  m->add_option("--recompute-granularity", a.recompute_granularity,
                "full: recompute whole layers in backward; selective: only the core attention");
  m->add_option("--recompute-method", a.recompute_method,
                "uniform: groups of --recompute-num-layers layers; block: the first --recompute-num-layers layers");
  m->add_option("--recompute-num-layers", a.recompute_num_layers, "Layers per group (uniform) or recomputed (block)");
  m->add_flag("--recompute-activations", a.recompute_activations, "Same as --recompute-granularity selective");
  m->add_option("--ddp-bucket-size", a.ddp_bucket_size, "Elements per data-parallel gradient bucket");
  m->add_flag("--overlap-grad-reduce", a.overlap_grad_reduce,
              "Start each bucket's all-reduce during the last micro-batch's backward");
  m->add_flag("--use-distributed-optimizer", a.use_distributed_optimizer,
              "Shard Adam's state over the data-parallel ranks: reduce-scatter gradients, all-gather parameters");
  m->add_flag("--overlap-param-gather", a.overlap_param_gather,
              "Wait for the distributed optimizer's parameter all-gather only when the next forward needs it");
  m->add_option("--distributed-timeout-minutes", a.distributed_timeout_minutes,
                "Abort the job when a collective takes longer than this");

  auto* p = app.add_option_group("mixed precision");
  p->add_flag("--bf16", a.bf16, "bf16 GEMM inputs with fp32 accumulation, fp32 master weights and gradients");
  p->add_flag("--fp16", a.fp16, "fp16 GEMM inputs with fp32 accumulation and loss scaling");
  p->add_flag("--accumulate-allreduce-grads-in-fp32", a.accumulate_allreduce_grads_in_fp32,
              "Gradients in fp32 (always so in Tessera)");
  p->add_option("--loss-scale", a.loss_scale, "Constant loss scale (0: dynamic with --fp16, none with --bf16)");
  p->add_option("--initial-loss-scale", a.initial_loss_scale, "Initial dynamic loss scale");
  p->add_option("--min-loss-scale", a.min_loss_scale, "Minimum dynamic loss scale");
  p->add_option("--loss-scale-window", a.loss_scale_window, "Steps without overflow before the scale doubles");
  p->add_option("--hysteresis", a.hysteresis, "Overflows tolerated before the dynamic scale halves");

  auto* d = app.add_option_group("data");
  d->add_flag("--mock-data", a.mock_data, "Train on a synthetic, learnable token stream");
  keep_last_occurrence(
      d->add_option("--data-path", a.data_path, "Dataset prefix, or weights and prefixes: w1 p1 w2 p2 ..."));
  CLI::Option* split_flag =
      d->add_option("--split", a.split, "Train, validation and test shares of the documents, e.g. 949,50,1");
  const char* split_help[3] = {"Training dataset prefix, or weights and prefixes (instead of --data-path)",
                               "Validation dataset prefix, or weights and prefixes (instead of --data-path)",
                               "Test dataset prefix, or weights and prefixes (instead of --data-path)"};
  for (int i = 0; i < 3; ++i)
    keep_last_occurrence(d->add_option(data::kSplitDataPathFlags[i], a.split_data_path[i], split_help[i]));
  d->add_option("--data-cache-path", a.data_cache_path, "Where built sample indices are cached");
  d->add_option("--tokenizer-type", a.tokenizer_type,
                "GPT2BPETokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer, "
                "BertWordPieceLowerCase, BertWordPieceCase (BERT's vocab.txt in --vocab-file), NullTokenizer");
  d->add_option("--vocab-file", a.vocab_file, "GPT-2 vocabulary (encoder.json)");
  d->add_option("--merge-file", a.merge_file, "GPT-2 merges (vocab.bpe)");
  d->add_option("--tokenizer-model", a.tokenizer_model, "SentencePiece model");
  d->add_option("--vocab-size", a.vocab_size, "Vocabulary size of the NullTokenizer");
  d->add_flag("--eod-mask-loss", a.eod_mask_loss, "Do not count positions whose input is end-of-document");
  d->add_flag("--reset-position-ids", a.reset_position_ids, "Restart positions after each end-of-document");
  d->add_flag("--reset-attention-mask", a.reset_attention_mask, "Attend only within each document");
  d->add_option("--mask-prob", a.mask_prob, "BERT: probability of masking a word");
  d->add_option("--short-seq-prob", a.short_seq_prob, "BERT: probability of a sample shorter than --seq-length");

  auto* t = app.add_option_group("training");
  t->add_option("--micro-batch-size", a.micro_batch_size, "Samples per micro-batch");
  t->add_option("--global-batch-size", a.global_batch_size, "Samples per iteration (default: micro batch size x data-parallel size)");
  t->add_option("--train-iters", a.train_iters, "Iterations to train (or --train-samples)");
  t->add_option("--train-samples", a.train_samples, "Samples to train on, instead of --train-iters");
  keep_last_occurrence(t->add_option("--rampup-batch-size", a.rampup_batch_size,
                "START INCREMENT SAMPLES: the global batch grows from START by INCREMENT to --global-batch-size "
                "over SAMPLES samples (needs --train-samples)"))
      ->expected(3);
  t->add_option("--step-batch-size-schedule", a.step_batch_size_schedule,
                "\"THRESHOLD:BS THRESHOLD:BS ...\": from THRESHOLD consumed tokens on (K, M, B, T suffixes), the global "
                "batch is BS samples; the first threshold is 0 (needs --train-samples, not --global-batch-size)");
  t->add_option("--lr", a.lr, "Peak learning rate")->required();
  t->add_option("--min-lr", a.min_lr, "Learning rate at the end of the decay");
  t->add_option("--weight-decay", a.weight_decay, "AdamW weight decay");
  t->add_option("--start-weight-decay", a.start_weight_decay, "Weight decay at the start (with --weight-decay-incr-style)");
  t->add_option("--end-weight-decay", a.end_weight_decay, "Weight decay at the end (with --weight-decay-incr-style)");
  t->add_option("--weight-decay-incr-style", a.weight_decay_incr_style,
                "constant (--weight-decay), or linear or cosine from --start-weight-decay to --end-weight-decay over "
                "the run");
  t->add_option("--adam-beta1", a.adam_beta1, "AdamW beta1");
  t->add_option("--adam-beta2", a.adam_beta2, "AdamW beta2");
  t->add_option("--adam-eps", a.adam_eps, "AdamW epsilon");
  t->add_option("--lr-decay-style", a.lr_decay_style, "constant, linear or cosine");
  t->add_option("--lr-warmup-iters", a.lr_warmup_iters, "Warm-up iterations");
  t->add_option("--lr-warmup-fraction", a.lr_warmup_fraction, "Warm-up as a fraction of the decay iterations");
  t->add_option("--lr-warmup-init", a.lr_warmup_init, "Learning rate the warm-up starts from");
  t->add_option("--lr-decay-iters", a.lr_decay_iters, "Decay iterations (default: train iters)");
  t->add_option("--lr-warmup-samples", a.lr_warmup_samples, "Warm-up samples (with --train-samples)");
  t->add_option("--lr-decay-samples", a.lr_decay_samples, "Decay samples (with --train-samples; default: train samples)");
  t->add_option("--clip-grad", a.clip_grad, "Clip gradients to this global norm (0: off)");
  t->add_option("--seed", a.seed, "Random seed")->check(rules::seed_rule);
  t->add_option("--eval-interval", a.eval_interval, "Iterations between evaluations");
  t->add_option("--eval-iters", a.eval_iters, "Iterations per evaluation (0: none)");
  t->add_option("--log-interval", a.log_interval, "Iterations between log lines");
  t->add_option("--sample-interval", a.sample_interval, "Iterations between greedy samples in the log (0: none)");
  t->add_option("--sample-prompt", a.sample_prompt, "Prompt of the samples (--sample-interval)");

  auto* l = app.add_option_group("logging and checkpoints");
  l->add_option("--max-nan-iterations", a.max_nan_iterations,
                "Stop after this many consecutive iterations with a non-finite loss or gradient norm");
  l->add_option("--log-dir", a.log_dir, "Write metrics as JSON lines to DIR/metrics.jsonl");
  l->add_option("--tensorboard-dir", a.tensorboard_dir, "Write TensorBoard event files here");
  l->add_flag("--log-params-norm", a.log_params_norm, "Add the parameters' global L2 norm to the log line");
  l->add_option("--save", a.save, "Checkpoint directory to save to");
  l->add_option("--save-interval", a.save_interval, "Iterations between checkpoints");
  l->add_option("--load", a.load, "Checkpoint directory to resume from");
  l->add_flag("--no-load-optim", a.no_load_optim, "Do not load the optimizer state");
  l->add_flag("--no-load-rng", a.no_load_rng, "Do not load the random state");
  l->add_flag("--no-save-optim", a.no_save_optim, "Save the weights without the optimizer state");
  l->add_flag("--exit-on-missing-checkpoint", a.exit_on_missing_checkpoint,
              "With --load: stop with an error when there is no checkpoint, instead of training from scratch");
  l->add_flag("--finetune", a.finetune, "Load only the model weights and start at iteration 0");
  l->add_option("--ckpt-keep-last", a.ckpt_keep_last, "Keep only the newest N checkpoints (0: all)");
  l->add_flag("--async-save", a.async_save,
              "Write checkpoints on a background thread while training goes on (the tensors copied to host "
              "buffers first); the tracker moves once every rank's files are complete");
  l->add_option("--non-persistent-save-interval", a.non_persistent_save_interval,
                "Iterations between non-persistent checkpoints (only the newest kept; --load takes the newest "
                "checkpoint of any kind)");
  l->add_option("--non-persistent-ckpt-type", a.non_persistent_ckpt_type,
                "global (a checkpoint in --non-persistent-global-ckpt-dir) or local (each rank's own files in "
                "--non-persistent-local-ckpt-dir, on its node's disk)");
  l->add_option("--non-persistent-global-ckpt-dir", a.non_persistent_global_ckpt_dir,
                "Directory of the global non-persistent checkpoints (default: --save/non_persistent, and "
                "--load/non_persistent when resuming)");
  l->add_option("--non-persistent-local-ckpt-dir", a.non_persistent_local_ckpt_dir,
                "Directory of the local non-persistent checkpoints on each node (rank r writes under rank_r)");
  l->add_flag("--exit-signal-handler", a.exit_signal_handler,
              "On SIGTERM, SIGINT or --exit-signal, save a checkpoint at the end of the iteration and exit 0");
  l->add_option("--exit-signal", a.exit_signal,
                "Signal that --exit-signal-handler also catches: SIGTERM (default), SIGINT, SIGUSR1 or SIGUSR2. "
                "Under mpirun use SIGUSR1 and send it to mpirun, which forwards it");
  l->add_option("--exit-interval", a.exit_interval,
                "Save (with --save) and exit 0 after the iteration that is a multiple of this (0: never)");
  l->add_option("--exit-duration-in-mins", a.exit_duration_in_mins,
                "Save (with --save) and exit 0 after the iteration that ends past this many minutes (0: never)");
  l->add_flag("--skip-train", a.skip_train, "Do not train: only evaluate the validation and test splits");

  add_distillation_flags(*app.add_option_group("knowledge distillation"), a);
  add_resilience_flags(*app.add_option_group("resilience"), a);
  add_megatron_compat_flags(*app.add_option_group("Megatron flags accepted with no effect here"),
                            a.megatron_compat_flags);
  add_megatron_refused_flags(*app.add_option_group("Megatron flags refused here (features Tessera does not have)"));

  CLI::Option_group* device = app.add_option_group("device");
  device->add_option("--device", a.device_flag,
                     "cpu, cuda or cuda:N (Tessera's own flag). Default: cuda:0 where this build has CUDA, a GPU is "
                     "usable and the GPU path runs this job (one rank, a dense GPT), else cpu; the start-up line says "
                     "which and why");
  device->add_option("--device-collectives", a.device_collectives,
                     "auto, staged or nccl (Tessera's own flag): how the parallel groups of a --device cuda run on "
                     "several ranks move device tensors. auto: NCCL where every member of a group has a GPU of its "
                     "own and NCCL loads, else staged through pinned host memory over MPI; staged: always through "
                     "the host; nccl: NCCL or an error saying why not");

  take_last_occurrence_of_scalars(app);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw HelpRequested{app.help()};
  } catch (const CLI::ParseError& e) {
    const std::string unknown = unknown_flag_message(app, args);  // a typo, before what it caused
    throw Error(str_cat(unknown.empty() ? e.what() : unknown, " (tessera train --help lists the flags)"));
  }
  TESSERA_CHECK(app.count("--seq-length") + app.count("--encoder-seq-length") > 0,
                "--seq-length is required (or Megatron's --encoder-seq-length): the sequence length");
  // Megatron's default of both is None: neither given is a missing flag, not "--train-iters=0".
  TESSERA_CHECK(app.count("--train-iters") + app.count("--train-samples") > 0,
                "give --train-iters or --train-samples: how long to train");
  // 0 is finalize_data's "not given" (Megatron's None, micro batch x data-parallel size); given, it is refused.
  if (app.count("--global-batch-size") > 0) rules::require_positive("--global-batch-size", a.global_batch_size);
  a.split_given = split_flag->count() > 0;
  a.non_persistent_save_interval_given = app.count("--non-persistent-save-interval") > 0;
  finalize(a);
  return a;
}

CLI::Option* keep_last_occurrence(CLI::Option* option) {
  // With trigger_on_parse CLI11 stores each occurrence's values as it reads them, clearing the earlier
  // ones; TakeAll keeps all of that occurrence's values (TakeLast would keep its last value alone).
  return option->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->trigger_on_parse();
}

void finalize(TrainArguments& a) {
  finalize_model(a);
  finalize_parallel_layout(a);
  finalize_data(a);
  finalize_training_loop(a);  // before the optimizer: the schedule's length defaults to --train-iters
  finalize_optimizer(a);
  finalize_checkpointing(a);
  finalize_token_slices(a);
  finalize_context_parallel(a);
  finalize_ouroboros(a);
  finalize_resilience(a);
  finalize_device(a);        // after every rule of what the GPU path refuses
  finalize_distillation(a);  // it reads the teacher's checkpoint index, after every cheaper rule
  finalize_resume(a);        // it reads --load's checkpoint index
}

}  // namespace tessera::train
