// `tessera train` flags, spelled as Megatron-LM's, and the rules between them. Everything is checked
// before any memory is allocated; a violated rule names the flag, the value and the rule.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/language_model.h"
#include "optim/adamw_optimizer.h"
#include "optim/loss_scaler.h"
#include "optim/lr_scheduler.h"

namespace CLI {
class App;
}

namespace tessera::train {

struct TrainArguments {
  // Model.
  int64_t num_layers = 0, hidden_size = 0, num_attention_heads = 0;
  int64_t ffn_hidden_size = 0, kv_channels = 0;  // 0: Megatron's defaults (4h or 8h/3 for SwiGLU; h/heads)
  bool group_query_attention = false;
  int64_t num_query_groups = 1;
  int64_t seq_length = 0, max_position_embeddings = 0;
  std::string position_embedding_type = "learned_absolute";
  float rotary_base = 10000.0f, rotary_percent = 1.0f;
  std::string normalization = "LayerNorm";
  float norm_epsilon = 1e-5f;
  bool swiglu = false, untie_embeddings_and_output_weights = false, disable_bias_linear = false;
  float hidden_dropout = 0.1f, attention_dropout = 0.1f, init_method_std = 0.02f;
  int64_t make_vocab_size_divisible_by = 128;
  int64_t tensor_model_parallel_size = 1, pipeline_model_parallel_size = 1;
  // Interleaved 1F1B: either flag gives the model chunks per pipeline rank (0: not set).
  int64_t num_layers_per_virtual_pipeline_stage = 0, num_virtual_stages_per_pipeline_rank = 0;
  bool sequence_parallel = false;
  // Activation recomputation, as Megatron: granularity "" (none), "full" or "selective".
  std::string recompute_granularity, recompute_method;
  bool recompute_activations = false;  // = --recompute-granularity selective
  int64_t recompute_num_layers = 0;
  int64_t ddp_bucket_size = 40000000;  // elements, as Megatron's default
  bool overlap_grad_reduce = false;
  // Adam's state sharded over the data-parallel group (optim/distributed_optimizer.h), and its parameter
  // all-gather overlapped with the next forward.
  bool use_distributed_optimizer = false, overlap_param_gather = false;
  int64_t distributed_timeout_minutes = 10;
  // Mixed precision, as Megatron: GEMM inputs in bf16 or fp16 with fp32 accumulation, fp32 master weights
  // and gradients (always accumulated and all-reduced in fp32, so --accumulate-allreduce-grads-in-fp32 is
  // what Tessera does anyway). fp16 scales the loss: --loss-scale fixes the scale, otherwise it is dynamic.
  bool bf16 = false, fp16 = false, accumulate_allreduce_grads_in_fp32 = false;
  float loss_scale = 0;  // 0: dynamic (fp16) or none (bf16)
  float initial_loss_scale = 4294967296.0f, min_loss_scale = 1.0f;
  int64_t loss_scale_window = 1000, hysteresis = 2;

  // Data.
  bool mock_data = false;
  std::vector<std::string> data_path;  // "prefix" or "w1 prefix1 w2 prefix2 ..."
  std::string split = "969, 30, 1";
  std::string data_cache_path;
  std::string tokenizer_type, vocab_file, merge_file, tokenizer_model;
  int64_t vocab_size = 0;
  bool eod_mask_loss = false, reset_position_ids = false, reset_attention_mask = false;

  // Training.
  int64_t micro_batch_size = 1, global_batch_size = 0, train_iters = 0;
  float lr = 0, min_lr = 0, weight_decay = 0.01f, adam_beta1 = 0.9f, adam_beta2 = 0.999f, adam_eps = 1e-8f;
  std::string lr_decay_style = "linear";
  int64_t lr_warmup_iters = 0, lr_decay_iters = 0;
  float lr_warmup_fraction = -1;  // unset
  float clip_grad = 1.0f;
  uint64_t seed = 1234;
  int64_t eval_interval = 1000, eval_iters = 100, log_interval = 100;
  int64_t max_nan_iterations = 3;  // consecutive iterations with a non-finite loss or grad norm before stopping
  int64_t sample_interval = 0;  // print a greedy continuation of sample_prompt every N iterations (0: off)
  std::string sample_prompt;

  // Logging and checkpoints.
  std::string log_dir, tensorboard_dir, save, load;
  int64_t save_interval = 0;
  bool no_load_optim = false, no_load_rng = false, finetune = false;
  int64_t ckpt_keep_last = 0;         // 0: keep every checkpoint
  bool exit_signal_handler = false;   // SIGTERM/SIGINT: save at the end of the iteration and exit 0
  // As Megatron: save and exit 0 after an iteration that is a multiple of exit_interval, or that ends
  // more than exit_duration_in_mins after the start (Megatron takes whole minutes; fractions work here).
  int64_t exit_interval = 0;           // 0: never
  double exit_duration_in_mins = 0;    // 0: never
  bool skip_train = false;             // only evaluate (validation and test splits) at the loaded iteration

  // Derived by finalize().
  int64_t tokenizer_vocab_size = 0;  // ids the tokenizer produces (end-of-document id included)
  int32_t eod = -1;
  model::ModelConfig model;
  optim::LrSchedule lr_schedule;
  optim::AdamWConfig adam;
  int64_t num_micro_batches = 0;   // per data-parallel rank
  int64_t virtual_pipeline_size = 1;  // model chunks per pipeline rank
  model::Recompute recompute;         // what the model chunks recompute in backward
  std::optional<optim::LossScalerConfig> loss_scaler;  // --fp16, or --loss-scale with --bf16
  // Testing hook, not a flag: the gradients are made NaN at these iterations (1-based); under loss
  // scaling that is an overflow.
  std::vector<int64_t> inject_nan_at_iterations;
  int64_t world_size = 1;
  int64_t data_parallel_size() const { return world_size / (tensor_model_parallel_size * pipeline_model_parallel_size); }
};

// Parses `args` (without the subcommand). Unknown flags and violated rules throw tessera::Error;
// --help prints usage and throws HelpRequested.
// world_size is the number of processes (ranks) of the job: layout rules are checked against it.
TrainArguments parse_train_arguments(const std::vector<std::string>& args, int64_t world_size = 1);

struct HelpRequested {
  std::string text;
};

// Checks every rule and fills the derived fields. Called by parse_train_arguments.
void finalize(TrainArguments& a);

// Adds the flags that define the model (--num-layers ... --make-vocab-size-divisible-by; not the
// parallel layout) to `app`, writing into `a`. None is required here; tessera train requires some.
void add_model_flags(CLI::App& app, TrainArguments& a);

}  // namespace tessera::train
