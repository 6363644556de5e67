// What `tessera generate`, `serve` and `eval` share: the flags that name a checkpoint, its layout
// and its tokenizer, and running a command on every rank of an MPI job (a bad flag: rank 0 reports it
// and every rank exits 1; a failure after start-up aborts the job, so no rank waits forever).
#pragma once

#include <chrono>
#include <functional>
#include <iostream>
#include <memory>

#include "apps/command_line.h"
#include "comm/mpi_process_group.h"
#include "infer/loaded_model.h"

namespace tessera::apps {

inline void add_load_flags(CLI::App& app, infer::LoadOptions& o) {
  app.add_option("--load", o.load, "Checkpoint directory (its latest iteration)")->required();
  app.add_option("--tensor-model-parallel-size", o.tensor_model_parallel_size,
                 "Tensor-parallel ranks (the checkpoint's size; the world must be a multiple)");
  app.add_option("--pipeline-model-parallel-size", o.pipeline_model_parallel_size,
                 "Pipeline stages (1 for now)");
  app.add_option("--tokenizer-type", o.tokenizer.type, "Tokenizer (default: the checkpoint's)");
  app.add_option("--vocab-file", o.tokenizer.vocab_file, "GPT-2 vocabulary (encoder.json)");
  app.add_option("--merge-file", o.tokenizer.merge_file, "GPT-2 merges (vocab.bpe)");
  app.add_option("--tokenizer-model", o.tokenizer.tokenizer_model, "SentencePiece model");
}

// Parses on every rank, then runs `body(world)`; returns the exit status.
inline int run_on_every_rank(CLI::App& app, const std::vector<std::string>& args, const char* command,
                             const std::function<void(comm::ProcessGroup&)>& body) {
  comm::MpiRuntime mpi;
  std::unique_ptr<comm::ProcessGroup> world = comm::make_mpi_world_group();
  try {
    if (!parse_command_line(app, args, command)) return 0;
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
