#include "train/arguments.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>

#include "data/tokenizer_factory.h"

namespace tessera::train {
namespace {

// The rule helpers name the flag, its value and the rule.
template <typename T>
void require(bool ok, const char* flag, T value, const std::string& rule) {
  TESSERA_CHECK(ok, flag, "=", value, ": ", rule);
}

template <typename T>
void require_positive(const char* flag, T value) {
  require(value > 0, flag, value, "must be positive");
}

}  // namespace

// The flags that define the model (not its layout): `tessera train`'s, and those `generate`, `serve` and
// `eval` accept from a Megatron launch script.
void add_model_flags(CLI::App& app, TrainArguments& a) {
  app.add_option("--num-layers", a.num_layers, "Number of transformer layers");
  app.add_option("--hidden-size", a.hidden_size, "Transformer hidden size");
  app.add_option("--num-attention-heads", a.num_attention_heads, "Number of attention heads");
  app.add_option("--ffn-hidden-size", a.ffn_hidden_size, "MLP hidden size (default 4h, or 8h/3 rounded to 64 with SwiGLU)");
  app.add_option("--kv-channels", a.kv_channels, "Head dimension (default hidden / heads)");
  app.add_flag("--group-query-attention", a.group_query_attention, "Use grouped-query attention");
  app.add_option("--num-query-groups", a.num_query_groups, "Key/value heads with --group-query-attention");
  app.add_option("--seq-length", a.seq_length, "Sequence length");
  app.add_option("--max-position-embeddings", a.max_position_embeddings, "Positions of the learned embedding (default seq length)");
  app.add_option("--position-embedding-type", a.position_embedding_type, "learned_absolute or rope");
  app.add_option("--rotary-base", a.rotary_base, "Base of the rotary frequencies");
  app.add_option("--rotary-percent", a.rotary_percent, "Fraction of each head rotated by RoPE");
  app.add_option("--normalization", a.normalization, "LayerNorm or RMSNorm");
  app.add_option("--norm-epsilon", a.norm_epsilon, "Epsilon of the norms");
  app.add_flag("--swiglu", a.swiglu, "SwiGLU MLP instead of GELU");
  app.add_flag("--untie-embeddings-and-output-weights", a.untie_embeddings_and_output_weights,
               "Separate output layer instead of the word embedding");
  app.add_flag("--disable-bias-linear", a.disable_bias_linear, "No biases in linear layers");
  app.add_option("--hidden-dropout", a.hidden_dropout, "Dropout after attention and MLP");
  app.add_option("--attention-dropout", a.attention_dropout, "Dropout of attention probabilities");
  app.add_option("--init-method-std", a.init_method_std, "Std of the normal initialisation");
  app.add_option("--make-vocab-size-divisible-by", a.make_vocab_size_divisible_by, "Pad the vocabulary to a multiple of this");
}

TrainArguments parse_train_arguments(const std::vector<std::string>& args, int64_t world_size) {
  TrainArguments a;
  a.world_size = world_size;
  CLI::App app{"tessera train: train a GPT model with Megatron-LM's flags", "tessera train"};
  app.option_defaults()->always_capture_default();
  // As with argparse in Megatron, a flag given twice takes its last value, so scripts can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto* m = app.add_option_group("model");
  add_model_flags(*m, a);
  for (const char* flag : {"--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length"})
    m->get_option(flag)->required();
  m->add_option("--tensor-model-parallel-size", a.tensor_model_parallel_size, "Tensor-parallel size");
  m->add_option("--pipeline-model-parallel-size", a.pipeline_model_parallel_size, "Pipeline-parallel size");
  m->add_option("--num-layers-per-virtual-pipeline-stage", a.num_layers_per_virtual_pipeline_stage,
                "Layers per model chunk of the interleaved schedule");
  m->add_option("--num-virtual-stages-per-pipeline-rank", a.num_virtual_stages_per_pipeline_rank,
                "Model chunks per pipeline rank of the interleaved schedule");
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
  d->add_option("--data-path", a.data_path, "Dataset prefix, or weights and prefixes: w1 p1 w2 p2 ...");
  d->add_option("--split", a.split, "Train, validation and test shares of the documents, e.g. 949,50,1");
  d->add_option("--data-cache-path", a.data_cache_path, "Where built sample indices are cached");
  d->add_option("--tokenizer-type", a.tokenizer_type,
                "GPT2BPETokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer, NullTokenizer");
  d->add_option("--vocab-file", a.vocab_file, "GPT-2 vocabulary (encoder.json)");
  d->add_option("--merge-file", a.merge_file, "GPT-2 merges (vocab.bpe)");
  d->add_option("--tokenizer-model", a.tokenizer_model, "SentencePiece model");
  d->add_option("--vocab-size", a.vocab_size, "Vocabulary size of the NullTokenizer");
  d->add_flag("--eod-mask-loss", a.eod_mask_loss, "Do not count positions whose input is end-of-document");
  d->add_flag("--reset-position-ids", a.reset_position_ids, "Restart positions after each end-of-document");
  d->add_flag("--reset-attention-mask", a.reset_attention_mask, "Attend only within each document");

  auto* t = app.add_option_group("training");
  t->add_option("--micro-batch-size", a.micro_batch_size, "Samples per micro-batch");
  t->add_option("--global-batch-size", a.global_batch_size, "Samples per iteration (default: micro batch size)");
  t->add_option("--train-iters", a.train_iters, "Iterations to train")->required();
  t->add_option("--lr", a.lr, "Peak learning rate")->required();
  t->add_option("--min-lr", a.min_lr, "Learning rate at the end of the decay");
  t->add_option("--weight-decay", a.weight_decay, "AdamW weight decay");
  t->add_option("--adam-beta1", a.adam_beta1, "AdamW beta1");
  t->add_option("--adam-beta2", a.adam_beta2, "AdamW beta2");
  t->add_option("--adam-eps", a.adam_eps, "AdamW epsilon");
  t->add_option("--lr-decay-style", a.lr_decay_style, "constant, linear or cosine");
  t->add_option("--lr-warmup-iters", a.lr_warmup_iters, "Warm-up iterations");
  t->add_option("--lr-warmup-fraction", a.lr_warmup_fraction, "Warm-up as a fraction of the decay iterations");
  t->add_option("--lr-decay-iters", a.lr_decay_iters, "Decay iterations (default: train iters)");
  t->add_option("--clip-grad", a.clip_grad, "Clip gradients to this global norm (0: off)");
  t->add_option("--seed", a.seed, "Random seed");
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
  l->add_option("--save", a.save, "Checkpoint directory to save to");
  l->add_option("--save-interval", a.save_interval, "Iterations between checkpoints");
  l->add_option("--load", a.load, "Checkpoint directory to resume from");
  l->add_flag("--no-load-optim", a.no_load_optim, "Do not load the optimizer state");
  l->add_flag("--no-load-rng", a.no_load_rng, "Do not load the random state");
  l->add_flag("--finetune", a.finetune, "Load only the model weights and start at iteration 0");
  l->add_option("--ckpt-keep-last", a.ckpt_keep_last, "Keep only the newest N checkpoints (0: all)");
  l->add_flag("--exit-signal-handler", a.exit_signal_handler,
              "On SIGTERM or SIGINT, save a checkpoint at the end of the iteration and exit");
  l->add_option("--exit-interval", a.exit_interval,
                "Save (with --save) and exit 0 after the iteration that is a multiple of this (0: never)");
  l->add_option("--exit-duration-in-mins", a.exit_duration_in_mins,
                "Save (with --save) and exit 0 after the iteration that ends past this many minutes (0: never)");
  l->add_flag("--skip-train", a.skip_train, "Do not train: only evaluate the validation and test splits");

  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 consumes from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw HelpRequested{app.help()};
  } catch (const CLI::ParseError& e) {
    throw Error(str_cat(e.what(), " (tessera train --help lists the flags)"));
  }
  finalize(a);
  return a;
}

void finalize(TrainArguments& a) {
  require_positive("--num-layers", a.num_layers);
  require_positive("--hidden-size", a.hidden_size);
  require_positive("--num-attention-heads", a.num_attention_heads);
  require_positive("--seq-length", a.seq_length);
  // Layout.
  const int64_t tp = a.tensor_model_parallel_size;
  require_positive("--tensor-model-parallel-size", tp);
  const int64_t pp = a.pipeline_model_parallel_size;
  require_positive("--pipeline-model-parallel-size", pp);
  require(a.num_layers % pp == 0, "--num-layers", a.num_layers,
          str_cat("must be divisible by --pipeline-model-parallel-size=", pp));
  require(a.num_layers_per_virtual_pipeline_stage == 0 || a.num_virtual_stages_per_pipeline_rank == 0,
          "--num-layers-per-virtual-pipeline-stage", a.num_layers_per_virtual_pipeline_stage,
          "cannot be combined with --num-virtual-stages-per-pipeline-rank");
  require(a.num_layers_per_virtual_pipeline_stage >= 0, "--num-layers-per-virtual-pipeline-stage",
          a.num_layers_per_virtual_pipeline_stage, "must be positive");
  require(a.num_virtual_stages_per_pipeline_rank >= 0, "--num-virtual-stages-per-pipeline-rank",
          a.num_virtual_stages_per_pipeline_rank, "must be positive");
  a.virtual_pipeline_size = 1;
  if (a.num_layers_per_virtual_pipeline_stage > 0) {
    require((a.num_layers / pp) % a.num_layers_per_virtual_pipeline_stage == 0,
            "--num-layers-per-virtual-pipeline-stage", a.num_layers_per_virtual_pipeline_stage,
            str_cat("must divide the ", a.num_layers / pp, " layers of each pipeline stage"));
    a.virtual_pipeline_size = a.num_layers / pp / a.num_layers_per_virtual_pipeline_stage;
  } else if (a.num_virtual_stages_per_pipeline_rank > 0) {
    require((a.num_layers / pp) % a.num_virtual_stages_per_pipeline_rank == 0,
            "--num-virtual-stages-per-pipeline-rank", a.num_virtual_stages_per_pipeline_rank,
            str_cat("must divide the ", a.num_layers / pp, " layers of each pipeline stage"));
    a.virtual_pipeline_size = a.num_virtual_stages_per_pipeline_rank;
  }
  require(a.virtual_pipeline_size == 1 || pp > 1, "--num-layers-per-virtual-pipeline-stage",
          a.num_layers_per_virtual_pipeline_stage,
          "the interleaved schedule needs --pipeline-model-parallel-size > 1");
  require(a.world_size % (tp * a.pipeline_model_parallel_size) == 0, "--tensor-model-parallel-size", tp,
          str_cat("x --pipeline-model-parallel-size=", a.pipeline_model_parallel_size,
                  " must divide the number of ranks (", a.world_size, ")"));
  require(a.num_attention_heads % tp == 0, "--num-attention-heads", a.num_attention_heads,
          str_cat("must be divisible by --tensor-model-parallel-size=", tp));
  require(!a.sequence_parallel || a.seq_length % tp == 0, "--seq-length", a.seq_length,
          str_cat("must be divisible by --tensor-model-parallel-size=", tp, " with --sequence-parallel"));
  require_positive("--ddp-bucket-size", a.ddp_bucket_size);
  // Recomputation.
  if (a.recompute_activations) {
    require(a.recompute_granularity.empty() || a.recompute_granularity == "selective", "--recompute-activations",
            "true", str_cat("contradicts --recompute-granularity=", a.recompute_granularity));
    a.recompute_granularity = "selective";
  }
  require(a.recompute_granularity.empty() || a.recompute_granularity == "full" ||
              a.recompute_granularity == "selective",
          "--recompute-granularity", a.recompute_granularity, "must be full or selective");
  if (a.recompute_granularity == "full") {
    require(a.recompute_method == "uniform" || a.recompute_method == "block", "--recompute-method",
            a.recompute_method.empty() ? "(none)" : a.recompute_method,
            "must be uniform or block with --recompute-granularity full");
    if (a.recompute_num_layers == 0) a.recompute_num_layers = 1;
    const int64_t chunk_layers = a.num_layers / pp / std::max<int64_t>(a.virtual_pipeline_size, 1);
    require(a.recompute_num_layers >= 1 && a.recompute_num_layers <= chunk_layers, "--recompute-num-layers",
            a.recompute_num_layers, str_cat("must be in [1, ", chunk_layers, "] (the layers of one model chunk)"));
    a.recompute = {a.recompute_method == "uniform" ? model::RecomputeMethod::Uniform : model::RecomputeMethod::Block,
                   a.recompute_num_layers};
  } else {
    require(a.recompute_method.empty(), "--recompute-method", a.recompute_method,
            "needs --recompute-granularity full");
    require(a.recompute_num_layers == 0, "--recompute-num-layers", a.recompute_num_layers,
            "needs --recompute-granularity full");
  }
  // As Megatron: the parameter all-gather overlaps only what the distributed optimizer does.
  require(!a.overlap_param_gather || a.use_distributed_optimizer, "--overlap-param-gather", "true",
          "needs --use-distributed-optimizer");
  require(!a.overlap_param_gather || a.overlap_grad_reduce, "--overlap-param-gather", "true",
          "needs --overlap-grad-reduce");
  require_positive("--distributed-timeout-minutes", a.distributed_timeout_minutes);
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
  if (a.kv_channels == 0) {
    require(a.hidden_size % a.num_attention_heads == 0, "--hidden-size", a.hidden_size,
            str_cat("must be divisible by --num-attention-heads=", a.num_attention_heads,
                    " (or set --kv-channels)"));
    a.kv_channels = a.hidden_size / a.num_attention_heads;
  }
  require_positive("--kv-channels", a.kv_channels);
  if (a.group_query_attention) {
    require_positive("--num-query-groups", a.num_query_groups);
    require(a.num_attention_heads % a.num_query_groups == 0, "--num-query-groups", a.num_query_groups,
            str_cat("must divide --num-attention-heads=", a.num_attention_heads));
    require(a.num_query_groups % tp == 0, "--num-query-groups", a.num_query_groups,
            str_cat("must be divisible by --tensor-model-parallel-size=", tp));
  } else {
    a.num_query_groups = a.num_attention_heads;
  }
  if (a.ffn_hidden_size == 0)
    a.ffn_hidden_size = a.swiglu ? static_cast<int64_t>(4.0 * static_cast<double>(a.hidden_size) * 2 / 3 / 64) * 64
                                 : 4 * a.hidden_size;
  require_positive("--ffn-hidden-size", a.ffn_hidden_size);
  require(a.ffn_hidden_size % tp == 0, "--ffn-hidden-size", a.ffn_hidden_size,
          str_cat("must be divisible by --tensor-model-parallel-size=", tp));

  require(a.position_embedding_type == "learned_absolute" || a.position_embedding_type == "rope",
          "--position-embedding-type", a.position_embedding_type, "must be learned_absolute or rope");
  bool rope = a.position_embedding_type == "rope";
  if (a.max_position_embeddings == 0) a.max_position_embeddings = a.seq_length;
  if (!rope)
    require(a.max_position_embeddings >= a.seq_length, "--max-position-embeddings", a.max_position_embeddings,
            str_cat("must be >= --seq-length=", a.seq_length, " with learned absolute positions"));
  require(a.rotary_percent > 0 && a.rotary_percent <= 1, "--rotary-percent", a.rotary_percent, "must be in (0, 1]");
  require(!rope || static_cast<int64_t>(static_cast<double>(a.kv_channels) * a.rotary_percent) >= 2,
          "--rotary-percent", a.rotary_percent, "rotates fewer than 2 dimensions of each head");
  require(a.rotary_base > 0, "--rotary-base", a.rotary_base, "must be positive");
  require(a.normalization == "LayerNorm" || a.normalization == "RMSNorm", "--normalization", a.normalization,
          "must be LayerNorm or RMSNorm");
  require(a.norm_epsilon > 0, "--norm-epsilon", a.norm_epsilon, "must be positive");
  require(a.hidden_dropout >= 0 && a.hidden_dropout < 1, "--hidden-dropout", a.hidden_dropout, "must be in [0, 1)");
  require(a.attention_dropout >= 0 && a.attention_dropout < 1, "--attention-dropout", a.attention_dropout,
          "must be in [0, 1)");
  require(a.init_method_std > 0, "--init-method-std", a.init_method_std, "must be positive");
  require_positive("--make-vocab-size-divisible-by", a.make_vocab_size_divisible_by);

  // Data: the tokenizer's files are loaded here, so a bad path is reported before anything else.
  require(a.mock_data != !a.data_path.empty(), "--data-path", a.data_path.empty() ? "(none)" : a.data_path[0],
          "give exactly one of --mock-data and --data-path");
  if (a.mock_data)
    require(a.tokenizer_type == "NullTokenizer", "--tokenizer-type", a.tokenizer_type,
            "--mock-data needs --tokenizer-type NullTokenizer");
  if (a.tokenizer_type == "NullTokenizer")
    require(a.vocab_size >= 2, "--vocab-size", a.vocab_size, "the NullTokenizer needs a vocabulary of at least 2");
  {
    auto tokenizer = data::build_tokenizer({a.tokenizer_type, a.vocab_file, a.merge_file, a.tokenizer_model, a.vocab_size});
    a.tokenizer_vocab_size = tokenizer->vocab_size();
    a.eod = tokenizer->eod();
  }

  // Batches and schedule.
  require_positive("--micro-batch-size", a.micro_batch_size);
  if (a.global_batch_size == 0) a.global_batch_size = a.micro_batch_size;
  require_positive("--global-batch-size", a.global_batch_size);
  require(a.global_batch_size % (a.micro_batch_size * a.data_parallel_size()) == 0, "--global-batch-size",
          a.global_batch_size,
          str_cat("must be divisible by --micro-batch-size=", a.micro_batch_size, " x data-parallel size=",
                  a.data_parallel_size()));
  require_positive("--train-iters", a.train_iters);
  require(a.lr > 0, "--lr", a.lr, "must be positive");
  require(a.min_lr >= 0 && a.min_lr <= a.lr, "--min-lr", a.min_lr, str_cat("must be in [0, --lr=", a.lr, "]"));
  require(a.weight_decay >= 0, "--weight-decay", a.weight_decay, "must be >= 0");
  require(a.adam_beta1 >= 0 && a.adam_beta1 < 1, "--adam-beta1", a.adam_beta1, "must be in [0, 1)");
  require(a.adam_beta2 >= 0 && a.adam_beta2 < 1, "--adam-beta2", a.adam_beta2, "must be in [0, 1)");
  require(a.adam_eps > 0, "--adam-eps", a.adam_eps, "must be positive");
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
  require_positive("--eval-interval", a.eval_interval);
  require(a.eval_iters >= 0, "--eval-iters", a.eval_iters, "must be >= 0");
  require_positive("--log-interval", a.log_interval);
  require_positive("--max-nan-iterations", a.max_nan_iterations);
  require(a.sample_interval >= 0, "--sample-interval", a.sample_interval, "must be >= 0");
  require(a.sample_interval == 0 || !a.sample_prompt.empty(), "--sample-interval", a.sample_interval,
          "needs --sample-prompt TEXT");
  require(a.sample_interval == 0 || a.pipeline_model_parallel_size == 1, "--sample-interval", a.sample_interval,
          "is not supported with --pipeline-model-parallel-size > 1 yet");
  require(a.save_interval >= 0, "--save-interval", a.save_interval, "must be >= 0");
  require(a.save_interval == 0 || !a.save.empty(), "--save-interval", a.save_interval, "needs --save DIR");
  require(a.ckpt_keep_last >= 0, "--ckpt-keep-last", a.ckpt_keep_last, "must be >= 0");
  require(a.exit_interval >= 0, "--exit-interval", a.exit_interval, "must be >= 0 (0: never)");
  require(std::isfinite(a.exit_duration_in_mins) && a.exit_duration_in_mins >= 0, "--exit-duration-in-mins",
          a.exit_duration_in_mins, "must be a finite number >= 0 (0: never)");

  model::ModelConfig& c = a.model;
  c.num_layers = a.num_layers;
  c.hidden_size = a.hidden_size;
  c.num_attention_heads = a.num_attention_heads;
  c.num_query_groups = a.num_query_groups;
  c.kv_channels = a.kv_channels;
  c.ffn_hidden_size = a.ffn_hidden_size;
  c.seq_length = a.seq_length;
  c.max_position_embeddings = a.max_position_embeddings;
  c.vocab_size = a.tokenizer_vocab_size;
  c.padded_vocab_size = model::padded_vocab_size(c.vocab_size, a.make_vocab_size_divisible_by,
                                                 a.tensor_model_parallel_size);
  c.position_embedding = rope ? model::PositionEmbedding::Rope : model::PositionEmbedding::LearnedAbsolute;
  c.rotary_base = a.rotary_base;
  c.rotary_percent = a.rotary_percent;
  c.normalization = a.normalization == "RMSNorm" ? model::Normalization::RMSNorm : model::Normalization::LayerNorm;
  c.norm_epsilon = a.norm_epsilon;
  c.swiglu = a.swiglu;
  c.untie_embeddings_and_output_weights = a.untie_embeddings_and_output_weights;
  c.add_bias_linear = !a.disable_bias_linear;
  c.hidden_dropout = a.hidden_dropout;
  c.attention_dropout = a.attention_dropout;
  c.init_method_std = a.init_method_std;

  a.lr_schedule = {a.lr, a.min_lr, a.lr_warmup_iters, a.lr_decay_iters, optim::parse_lr_decay_style(a.lr_decay_style)};
  a.adam = {a.weight_decay, a.adam_beta1, a.adam_beta2, a.adam_eps, a.clip_grad};
  a.num_micro_batches = a.global_batch_size / (a.micro_batch_size * a.data_parallel_size());
  require(a.virtual_pipeline_size == 1 || a.num_micro_batches % pp == 0, "--global-batch-size", a.global_batch_size,
          str_cat("gives ", a.num_micro_batches, " micro-batches per pipeline (global batch / (micro batch x "
                  "data-parallel size)); the interleaved schedule needs a multiple of "
                  "--pipeline-model-parallel-size=", pp));
}

}  // namespace tessera::train
