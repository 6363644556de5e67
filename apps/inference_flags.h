// What `tessera generate`, `serve` and `eval` share: the flags that name a checkpoint, its layout
// and its tokenizer; the model flags of a Megatron launch script, checked against the checkpoint; and
// running a command on every rank of an MPI job (a bad flag: rank 0 reports it and every rank exits 1;
// a failure after start-up aborts the job, so no rank waits forever).
#pragma once

#include <chrono>
#include <functional>
#include <iostream>
#include <memory>

#include "apps/command_line.h"
#include "ckpt/checkpoint.h"
#include "comm/mpi_process_group.h"
#include "infer/loaded_model.h"
#include "train/args/arguments.h"
#include "train/args/model_flags.h"

namespace tessera::apps {

struct LoadFlags {
  infer::LoadOptions load;
  // The model flags of tessera train. The checkpoint defines the model: a flag given must agree with it
  // unless --use-checkpoint-args, and a flag left out takes the checkpoint's value.
  train::TrainArguments model;
  CLI::App* model_flags = nullptr;  // their option group, to tell which were given
  bool use_checkpoint_args = false, bf16 = false, fp16 = false;
};

// `seq_length_is_the_models`: false for eval, whose --seq-length is the evaluation window.
inline void add_load_flags(CLI::App& app, LoadFlags& f, bool seq_length_is_the_models = true) {
  infer::LoadOptions& o = f.load;
  app.add_option("--load", o.load, "Checkpoint directory (its latest iteration)")->required();
  app.add_option("--tensor-model-parallel-size", o.tensor_model_parallel_size,
                 "Tensor-parallel ranks (any size that splits the checkpoint's padded vocabulary: it is resharded "
                 "on load; the world must be a multiple of tp x pp)");
  app.add_option("--pipeline-model-parallel-size", o.pipeline_model_parallel_size,
                 "Pipeline stages (an even share of the layers each)");
  app.add_option("--expert-model-parallel-size", o.expert_model_parallel_size,
                 "MoE: ranks the experts are split over (any size dividing each layer's experts)");
  app.add_option("--expert-tensor-parallel-size", o.expert_tensor_parallel_size,
                 "MoE: ranks each expert is split over (default --tensor-model-parallel-size)");
  app.add_flag("--moe-grouped-gemm", o.moe_grouped_gemm, "MoE: each rank's local experts as one batched product");
  app.add_option("--tokenizer-type", o.tokenizer.type, "Tokenizer (default: the checkpoint's)");
  app.add_option("--vocab-file", o.tokenizer.vocab_file, "GPT-2 vocabulary (encoder.json)");
  app.add_option("--merge-file", o.tokenizer.merge_file, "GPT-2 merges (vocab.bpe)");
  app.add_option("--tokenizer-model", o.tokenizer.tokenizer_model, "SentencePiece model");
  app.add_option("--vocab-size", o.tokenizer.vocab_size, "Vocabulary size of the NullTokenizer");
  app.add_flag("--use-checkpoint-args", f.use_checkpoint_args,
               "Take the model from the checkpoint's configuration, ignoring model flags that disagree");
  app.add_flag("--bf16", f.bf16, "bf16 GEMM inputs with fp32 accumulation");
  app.add_flag("--fp16", f.fp16, "fp16 GEMM inputs with fp32 accumulation");
  CLI::App* group = app.add_option_group(
      "model", "The model flags of tessera train: those given must agree with the checkpoint, those left out take its values");
  // As tessera train (and Megatron's argparse): a model flag given twice takes its last value.
  group->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  train::add_model_flags(*group, f.model);
  if (!seq_length_is_the_models) group->remove_option(group->get_option("--seq-length"));
  f.model_flags = group;
}

// After parsing, on every rank: the precision, and the given model flags against the checkpoint's
// configuration (a conflict is an error naming the flag, the value given and the checkpoint's, or with
// --use-checkpoint-args a note on rank 0). A missing checkpoint is left for LoadedModel to report.
inline void check_load_flags(LoadFlags& f, bool reporter) {
  TESSERA_CHECK(!(f.bf16 && f.fp16), "--bf16=true: cannot be combined with --fp16");
  f.load.params_dtype = f.bf16 ? DType::BF16 : f.fp16 ? DType::F16 : DType::F32;
  if (f.load.load.empty() || ckpt::latest_checkpointed_iteration(f.load.load) < 0) return;
  const nlohmann::json run = ckpt::latest_checkpoint_args(f.load.load);
  if (!run.contains("model")) return;
  model::ModelConfig saved;
  try {
    saved = model::config_from_json(run["model"]);
  } catch (const Error& e) {
    throw Error(str_cat("--load=", f.load.load, ": ", e.what()));
  }
  const std::vector<train::ModelFlagConflict> conflicts = train::model_flag_conflicts(*f.model_flags, f.model, saved);
  if (conflicts.empty()) return;
  TESSERA_CHECK(f.use_checkpoint_args, train::describe(conflicts), ": a model flag given must agree with the "
                "checkpoint in ", f.load.load, " (leave it out, or pass --use-checkpoint-args to take the checkpoint's)");
  if (reporter)
    std::cerr << " > --use-checkpoint-args: using the checkpoint's model configuration, not " << train::describe(conflicts)
              << std::endl;
}

// Parses on every rank, then runs `body(world)`; returns the exit status. With `flags`, checks them
// (check_load_flags) as part of parsing.
inline int run_on_every_rank(CLI::App& app, const std::vector<std::string>& args, const char* command,
                             const std::function<void(comm::ProcessGroup&)>& body, LoadFlags* flags = nullptr) {
  comm::MpiRuntime mpi;
  std::unique_ptr<comm::ProcessGroup> world = comm::make_mpi_world_group();
  try {
    if (!parse_command_line(app, args, command)) return 0;
    if (flags) check_load_flags(*flags, world->rank() == 0);
  } catch (const Error& e) {
    if (world->rank() == 0) std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
  try {
    body(*world);
  } catch (const std::exception& e) {
    if (world->size() == 1) throw;
    comm::abort_all(std::string("error: ") + e.what());
  }
  return 0;
}

}  // namespace tessera::apps
