// `tessera train` flags, spelled as Megatron-LM's, and the rules between them. Everything is checked
// before any memory is allocated; a violated rule names the flag, the value and the rule.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/language_model.h"
#include "optim/adamw_optimizer.h"
#include "optim/loss_scaler.h"
#include "optim/lr_scheduler.h"
#include "pipeline/schedules.h"
#include "train/batch_size_rampup.h"
#include "train/token_slice_cost.h"

namespace CLI {
class App;
class Option;
}

namespace tessera::train {

// Megatron's defaults for the model flags, where they differ from ModelConfig's: one query group.
model::ModelConfig megatron_model_defaults();

struct TrainArguments {
  // Model: its hyper-parameters have one home, `model`, whose fields the model flags write directly
  // (add_model_flags). finalize_model fills what a flag leaves to a rule (--ffn-hidden-size 0: 4h, or
  // 8h/3 with SwiGLU; --kv-channels 0: h/heads; --max-position-embeddings 0: the sequence length;
  // the vocabulary sizes from the tokenizer). The flags below are not fields of a ModelConfig.
  model::ModelConfig model = megatron_model_defaults();
  // Megatron's --encoder-seq-length: for GPT and BERT the sequence length itself (-1: not given), which
  // finalize_model writes into model.seq_length; given with --seq-length, the two must agree.
  int64_t encoder_seq_length = -1;
  // Megatron's deprecated --no-position-embedding: no effect beside --position-embedding-type rope (the
  // only combination Megatron still accepts), refused otherwise (finalize_model).
  bool no_position_embedding = false;
  bool group_query_attention = false;  // without it every head is its own group (--num-query-groups ignored)
  int64_t make_vocab_size_divisible_by = 128;
  // RoPE scaling: --use-rope-scaling (Llama 3.x, factor --rope-scaling-factor) or
  // --rotary-seq-len-interpolation-factor (linear; 0: none), which finalize_model writes into model.
  bool use_rope_scaling = false;
  std::string rope_type;  // --rope-type: rope or yarn; empty: Megatron's None (yarn under MLA)
  int64_t rotary_seq_len_interpolation_factor = 0;
  // Mixture of experts: the flags that finalize_moe_model turns into model.moe (the rest write it).
  std::vector<int64_t> num_experts;   // one value, or one per MoE layer (PR-MoE); empty or 0: dense
  std::string moe_layer_freq = "1";   // an interval or a per-layer list
  std::string moe_router_score_function = "softmax", moe_router_load_balancing_type = "aux_loss";
  std::string moe_token_drop_policy = "probs", mlp_type = "standard";
  float moe_router_bias_update_rate = 1e-3f;  // the expert bias's step per global batch (train/expert_bias.h)

  // Parallel layout.
  int64_t tensor_model_parallel_size = 1, pipeline_model_parallel_size = 1;
  // Interleaved 1F1B: either flag gives the model chunks per pipeline rank (0: not set).
  int64_t num_layers_per_virtual_pipeline_stage = 0, num_virtual_stages_per_pipeline_rank = 0;
  // Megatron-Core's uneven pipeline split: the layers of the first and of the last stage (-1: not given).
  int64_t decoder_first_pipeline_num_layers = -1, decoder_last_pipeline_num_layers = -1;
  // Or Megatron-Core's even split of the layers with the embedding and/or the loss counted as one layer
  // each (pipeline::LayerSplit: the first/last model chunk builds one transformer layer fewer).
  bool account_for_embedding_in_pipeline_split = false, account_for_loss_in_pipeline_split = false;
  bool sequence_parallel = false;
  // Context parallelism (parallel/context_parallel.h): each sequence split over cp ranks, attention
  // around their ring. Step 1 of issue 37: dense GPT layers with data parallelism (finalize_context_parallel).
  int64_t context_parallel_size = 1;
  // Megatron's --cp-comm-type: one value for every layer, or one per layer. Tessera's ring attention is
  // Megatron's p2p; the others (a2a, allgather, a2a+p2p) are refused under cp > 1 (finalize_context_parallel).
  std::vector<std::string> cp_comm_type = {"p2p"};
  // Ouroboros (issue 38, docs/ouroboros.md): --pipeline-schedule 1f1b (Megatron's, interleaved with
  // virtual stages) or ouroboros (delayed gradients, K = pipeline size + 1 modules, the first and last
  // sharing the tied embedding), after --ouroboros-warmup-iters synchronous iterations.
  // --ouroboros-modules: K (0: pipeline size + 1; one process emulates any K).
  std::string pipeline_schedule = "1f1b";
  int64_t ouroboros_warmup_iters = 0, ouroboros_modules = 0;
  // Zero-bubble pipelines (pipeline/zero_bubble.h), the flags of the paper's Megatron fork: ZB-H1, or with
  // --zero-bubble-v-schedule ZB-V (two chunks per rank in a V); --zero-bubble-max-pending-backward bounds
  // the W passes a rank defers (0: only the memory bound).
  bool enable_zero_bubble = false, zero_bubble_v_schedule = false;
  int64_t zero_bubble_max_pending_backward = 0;
  // The iterations after the start one up to the end one time the F, B and W passes; the lists are then
  // rebuilt from those costs (train/zero_bubble_timing.h). The fork's defaults.
  int64_t zero_bubble_timers_start_iter = 100, zero_bubble_timers_end_iter = 110;
  // TeraPipe's token slicing (model/token_sliced_chunk.h): --pipeline-token-slices N | l1,l2,... | auto as
  // given, and the slice lengths (finalize_token_slices; empty: the whole sequence at once). With auto,
  // TeraPipe's dynamic program chooses them from token_slice_cost_model's cost (the stated model when
  // unset) and token_slices_source says whose costs those were.
  std::string pipeline_token_slices;
  std::vector<int64_t> token_slices;
  TokenSliceCostModel token_slice_cost_model;
  std::string token_slices_source;
  // Expert parallelism: experts split over ep ranks, each expert's MLP over etp ranks (0: the tensor-
  // parallel size), tokens carried by an all-to-all or an all-gather dispatcher.
  int64_t expert_model_parallel_size = 1, expert_tensor_parallel_size = 0;
  std::string moe_token_dispatcher_type = "alltoall";
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
  // --train-data-path, --valid-data-path, --test-data-path, each as --data-path: each split from its own
  // blend, the whole of each dataset (instead of --data-path and --split; an empty one: no such split).
  std::array<std::vector<std::string>, 3> split_data_path;
  std::string split = "969, 30, 1";
  bool split_given = false;  // --split was on the command line (refused with the per-split paths)
  std::string data_cache_path;
  std::string tokenizer_type, vocab_file, merge_file, tokenizer_model;
  int64_t vocab_size = 0;
  bool eod_mask_loss = false, reset_position_ids = false, reset_attention_mask = false;
  // BERT's samples (data/bert_dataset.h): the share of words masked, and of samples shorter than the
  // sequence. Doubles, as Python's floats: Megatron rounds with them (round(n * mask_prob),
  // round(1 / short_seq_prob)), and 0.15f times 30 is past the tie at 4.5 that 0.15 times 30 sits on.
  double mask_prob = 0.15, short_seq_prob = 0.1;

  // Training.
  int64_t micro_batch_size = 1, global_batch_size = 0, train_iters = 0;
  // Megatron's sample-based training: --train-samples instead of --train-iters, the learning-rate
  // schedule in samples, and the global batch's ramp-up (train/batch_size_rampup.h).
  int64_t train_samples = 0, lr_warmup_samples = 0, lr_decay_samples = 0;
  std::vector<int64_t> rampup_batch_size;  // START INCREMENT SAMPLES, or empty
  std::string step_batch_size_schedule;    // "THRESHOLD:BS ..." as given (tokens), or empty
  float lr = 0, min_lr = 0, weight_decay = 0.01f, adam_beta1 = 0.9f, adam_beta2 = 0.999f, adam_eps = 1e-8f;
  std::string lr_decay_style = "linear";
  int64_t lr_warmup_iters = 0, lr_decay_iters = 0;
  double lr_warmup_fraction = -1;  // unset; a double, as Python's: 0.7f x 10 iterations truncates to 6
  float lr_warmup_init = 0;
  // Megatron's weight-decay schedule: constant (--weight-decay), or linear or cosine from the start to the
  // end value (-1: not given) over the run's iterations (or samples).
  float start_weight_decay = -1, end_weight_decay = -1;
  std::string weight_decay_incr_style = "constant";
  float clip_grad = 1.0f;
  uint64_t seed = 1234;
  int64_t eval_interval = 1000, eval_iters = 100, log_interval = 100;
  int64_t max_nan_iterations = 3;  // consecutive iterations with a non-finite loss or grad norm before stopping
  int64_t sample_interval = 0;  // print a greedy continuation of sample_prompt every N iterations (0: off)
  std::string sample_prompt;

  // Logging and checkpoints.
  std::string log_dir, tensorboard_dir, save, load;
  bool log_params_norm = false;
  int64_t save_interval = 0;
  bool no_load_optim = false, no_load_rng = false, finetune = false;
  bool no_save_optim = false, exit_on_missing_checkpoint = false;
  int64_t ckpt_keep_last = 0;         // 0: keep every checkpoint
  // --async-save (Megatron's): a save copies the tensors into host buffers and a background thread
  // writes the files while training goes on; the tracker moves once every rank's files are complete.
  bool async_save = false;
  // Megatron's non-persistent checkpoints: every non_persistent_save_interval iterations (0: none;
  // given, it must be positive), of type "global" (a checkpoint like --save's, in
  // non_persistent_global_ckpt_dir: default --save/non_persistent, read from --load/non_persistent) or
  // "local" (each rank its own files under non_persistent_local_ckpt_dir/rank_NNNNN, each node's own
  // disk); only the newest is kept, and --load resumes from the newest of every kind.
  int64_t non_persistent_save_interval = 0;
  bool non_persistent_save_interval_given = false;
  std::string non_persistent_ckpt_type;  // "" (none), global or local
  std::string non_persistent_global_ckpt_dir, non_persistent_local_ckpt_dir;
  bool exit_signal_handler = false;   // SIGTERM/SIGINT/exit_signal: save at the end of the iteration, exit 0
  std::string exit_signal = "SIGTERM";  // also caught by the handler: SIGUSR1 is what mpirun forwards
  // As Megatron: save and exit 0 after an iteration that is a multiple of exit_interval, or that ends
  // more than exit_duration_in_mins after the start (Megatron takes whole minutes; fractions work here).
  int64_t exit_interval = 0;           // 0: never
  double exit_duration_in_mins = 0;    // 0: never
  bool skip_train = false;             // only evaluate (validation and test splits) at the loaded iteration
  // Resilience (Megatron's names; train/rerun_state_machine.h, train/straggler_report.h).
  std::string rerun_mode = "validate_results";  // disabled, validate_results or report_stats
  bool check_for_nan_in_loss_and_grad = true;
  bool check_for_spiky_loss = false;
  int64_t error_injection_rate = 0;  // 0: no injection
  std::string error_injection_type = "transient_error";
  std::string result_rejected_tracker_filename;
  bool log_straggler = false;
  int64_t straggler_minmax_count = 1;
  bool disable_straggler_on_startup = false;
  // Megatron flags given that have no effect here, each with what Tessera does instead
  // (train/megatron_compat_flags.h), said at start-up.
  std::vector<std::string> megatron_compat_flags;

  // Knowledge distillation (Megatron-DeepSpeed's --kd; DeepSpeed-MoE's Mixture-of-Students): the loss per
  // token is α·CE + β·τ²·KL(softmax(z_T / τ) ‖ softmax(z_S / τ)) against a frozen teacher loaded from the
  // Tessera checkpoint in load_teacher and built from the configuration it records; staged: from
  // iteration kd_stop_iteration on (0: never) the LM loss alone, and the teacher is released.
  bool kd = false;
  float kd_temp = 1.0f, kd_alpha_ce = 1.0f, kd_beta_ce = 1.0f;
  std::string load_teacher;
  int64_t kd_stop_iteration = 0;

  // Derived by finalize() (and model.vocab_size: the ids the tokenizer produces, end-of-document included).
  int32_t eod = -1;
  optim::LrSchedule lr_schedule;
  optim::WeightDecaySchedule weight_decay_schedule;
  optim::AdamWConfig adam;
  int64_t num_micro_batches = 0;   // per data-parallel rank, at the final global batch size
  pipeline::LayerSplit layer_split;   // the layers of each pipeline stage (even, or the flags' uneven split)
  GlobalBatchSchedule batch_schedule;  // the global batch of each iteration (--rampup-batch-size, --step-batch-size-schedule)
  int64_t virtual_pipeline_size = 1;  // model chunks per pipeline rank (2 under ZB-V)
  pipeline::ZeroBubble zero_bubble = pipeline::ZeroBubble::Off;
  model::Recompute recompute;         // what the model chunks recompute in backward
  std::optional<optim::LossScalerConfig> loss_scaler;  // --fp16, or --loss-scale with --bf16
  // --kd: the teacher's configuration as its checkpoint records it, with this run's sequence length,
  // padded vocabulary and precision (finalize_distillation).
  model::ModelConfig teacher_model;
  // Testing hook, not a flag: the gradients are made NaN at these iterations (1-based); under loss
  // scaling that is an overflow.
  std::vector<int64_t> inject_nan_at_iterations;
  // Testing hook, not a flag: under --pipeline-schedule ouroboros in one process, add the gradients of
  // this many shares of the global batch as that many data-parallel replicas add them (train/
  // ouroboros_driver.h, OuroborosOptions::data_shares), the reference of the data-parallel run.
  int64_t ouroboros_emulated_replicas = 1;
  int64_t world_size = 1;
  // --device (Tessera's own flag; Megatron has none): cpu, cuda or cuda:N as given, empty when left out;
  // the device the trainer runs on and why, as its start-up line says (finalize_device).
  std::string device_flag;
  Device device = Device::cpu();
  std::string device_reason = "--device cpu";
  // Ranks of this node on the chosen GPU, this one included (train/gpu_choice.h): above 1, each caps its
  // device memory at an equal share.
  int gpu_ranks_sharing = 1;
  // --device-collectives (Tessera's own; Megatron has none): auto, staged or nccl, how the groups of a run
  // on several GPU ranks move device tensors (comm/device_collectives.h).
  std::string device_collectives = "auto";
  int64_t data_parallel_size() const {
    return world_size / (tensor_model_parallel_size * context_parallel_size * pipeline_model_parallel_size);
  }
};

// Parses `args` (without the subcommand). Unknown flags and violated rules throw tessera::Error;
// --help prints usage and throws HelpRequested.
// world_size is the number of processes (ranks) of the job: layout rules are checked against it.
TrainArguments parse_train_arguments(const std::vector<std::string>& args, int64_t world_size = 1);
// The same, with the cost that --pipeline-token-slices auto prices slices with (train/token_slice_cost.h).
TrainArguments parse_train_arguments(const std::vector<std::string>& args, int64_t world_size,
                                     const TokenSliceCostModel& token_slice_cost_model);

struct HelpRequested {
  std::string text;
};

// Checks every rule and fills the derived fields. Called by parse_train_arguments. It runs the parts
// below in this order, each after the ones it reads: the layout reads the model's sizes, the batches
// the data-parallel size, the learning-rate schedule the number of iterations.
void finalize(TrainArguments& a);
// Each checks the rules of its concern, throwing an Error that names the flag, the value and the rule,
// and fills its derived fields.
void finalize_model(TrainArguments& a);            // sizes, defaults by rule, positions, norms, dropout
void finalize_parallel_layout(TrainArguments& a);  // tp, pp, virtual stages, recomputation, buckets
// The pipeline schedule's shape of a finished layout for `micro_batches` micro-batches (no token slices).
pipeline::ScheduleShape schedule_shape(const TrainArguments& a, int64_t micro_batches);
void finalize_moe_model(TrainArguments& a);        // experts per layer, router, losses, capacity (by finalize_model)
void finalize_moe_layout(TrainArguments& a);       // ep, etp, dispatcher (by finalize_parallel_layout)
void finalize_mla_model(TrainArguments& a);        // --multi-latent-attention and its sizes, YaRN (by finalize_model)
void finalize_mtp_model(TrainArguments& a);        // --mtp-num-layers and what MTP runs with (by finalize_model)
void finalize_data(TrainArguments& a);             // data, tokenizer, vocabulary, batches and their ramp
void finalize_training_loop(TrainArguments& a);    // iterations (or samples), evaluation, logging, samples
std::string rampup_text(const TrainArguments& a);  // --rampup-batch-size as given ("16 16 5859375")
void finalize_optimizer(TrainArguments& a);        // AdamW, learning-rate schedule, mixed precision
void finalize_checkpointing(TrainArguments& a);    // saving and exiting
void finalize_distillation(TrainArguments& a);     // --kd and the teacher's checkpoint (reads its index)
// Where the non-persistent checkpoints of type global are saved (--non-persistent-global-ckpt-dir, default
// --save/non_persistent) and looked for by --load (default --load/non_persistent, as Megatron's
// _load_base_checkpoint); "" without that type.
std::string non_persistent_global_save_dir(const TrainArguments& a);
std::string non_persistent_global_load_dir(const TrainArguments& a);
// World rank r's directory of local non-persistent checkpoints: --non-persistent-local-ckpt-dir/rank_NNNNN.
std::string non_persistent_local_dir(const TrainArguments& a, int world_rank);
// The directory of the newest checkpoint --load resumes from that every rank can read: --load's, or the
// global non-persistent one when that is as new or newer (Megatron's rule); "" when neither holds one.
// (Local non-persistent checkpoints need the ranks to agree: Trainer::resume.)
std::string newest_shared_checkpoint_dir(const TrainArguments& a);
// The model and tokenizer flags against those recorded by the checkpoint in `dir` (finalize_resume's
// rule): differences are an Error unless --finetune allows them.
void check_resumed_model(const TrainArguments& a, const std::string& dir);
void finalize_resume(TrainArguments& a);  // --load's checkpoint holds this model and tokenizer (reads its index)
void finalize_token_slices(TrainArguments& a);
void finalize_ouroboros(TrainArguments& a);  // --pipeline-schedule ouroboros and what it runs with (yet)
void finalize_context_parallel(TrainArguments& a);  // --context-parallel-size and what it runs with (yet)    // --pipeline-token-slices and the layouts it runs with
// --device against this build and machine, and what the GPU path runs (train/device_setup.h).
void finalize_device(TrainArguments& a);
void finalize_resilience(TrainArguments& a);  // the rerun state machine and the straggler report

// A flag of several values (argparse's nargs='+': --data-path, --num-experts) given twice keeps the
// values of its last occurrence, as in Megatron, not both lists joined. Returns the option.
CLI::Option* keep_last_occurrence(CLI::Option* option);

// Adds the flags that define the model (--num-layers ... --make-vocab-size-divisible-by; not the
// parallel layout) to `app`, writing into `a.model` (and the few flags of `a` that need a rule).
// None is required here; tessera train requires some.
void add_model_flags(CLI::App& app, TrainArguments& a);
void add_moe_flags(CLI::App& app, TrainArguments& a);              // by add_model_flags
void add_mla_flags(CLI::App& app, TrainArguments& a);              // by add_model_flags
void add_mtp_flags(CLI::App& app, TrainArguments& a);              // by add_model_flags
void add_expert_parallel_flags(CLI::App& app, TrainArguments& a);  // --expert-model-parallel-size, ...
void add_distillation_flags(CLI::App& app, TrainArguments& a);     // --kd, --load-teacher, ...
void add_resilience_flags(CLI::App& app, TrainArguments& a);       // --rerun-mode, --log-straggler, ...

// Megatron's flag values for the model's enums: "learned_absolute", "rope"; "LayerNorm", "RMSNorm".
std::string megatron_name(model::PositionEmbedding p);
std::string megatron_name(model::Normalization n);

}  // namespace tessera::train
