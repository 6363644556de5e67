// Megatron's checkpoint layout with safetensors inside:
//   SAVE/latest_checkpointed_iteration.txt      the last complete iteration
//   SAVE/iter_0000100/model.tpXX.pp00.safetensors   this tensor rank's parameter shards, by name
//   SAVE/iter_0000100/optim.tpXX.pp00.dp000.safetensors  their Adam moments ("optimizer.exp_avg.NAME", ...)
//   SAVE/iter_0000100/index.json                iteration, data position, RNG seed, arguments, and for
//                                               every tensor its global shape and the slices held by
//                                               each file (view, split dimension, offset, length)
// Each slice is written once, by data-parallel rank 0 of its tensor group.
// The index records global shapes and slice offsets so that sharded layouts (tensor/pipeline parallel,
// distributed optimizer) are an extension of this format, not a new one. A checkpoint is written into
// a temporary directory that is renamed into place only when complete, so a failed save never damages
// an earlier checkpoint.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "comm/process_group.h"
#include "model/parameters.h"
#include "optim/adamw_optimizer.h"

namespace tessera::ckpt {

struct TrainingState {
  int64_t iteration = 0;
  int64_t consumed_train_samples = 0;
  int64_t skipped_iterations = 0;
  uint64_t seed = 0;  // all randomness is Philox keyed by (seed, iteration, element): this is the RNG state
  nlohmann::json args;  // the run's flags, for the record
};

// "iter_0000100"
std::string iteration_dir_name(int64_t iteration);

// Where this rank's shards go: its tensor-parallel rank names its files; only data-parallel rank 0 writes.
struct ShardPlacement {
  int tensor_rank = 0;
  int data_rank = 0;
  comm::ProcessGroup* world = nullptr;  // null for a single process
};

// Saves into `save_dir`/iter_XXXXXXX and then updates the tracker file. optimizer may be null.
// Collective over placement.world.
void save_checkpoint(const std::string& save_dir, const TrainingState& state, const model::ParameterSet& params,
                     const optim::AdamWOptimizer* optimizer, const ShardPlacement& placement = {});

// The iteration named by `load_dir`/latest_checkpointed_iteration.txt, or -1 when there is none.
int64_t latest_checkpointed_iteration(const std::string& load_dir);

// The "args" record of the latest checkpoint of `load_dir` (the model configuration among them).
nlohmann::json latest_checkpoint_args(const std::string& load_dir);

// Loads the latest checkpoint of `load_dir` into params (and the optimizer's moments and step count
// unless optimizer is null): each parameter reads the slice matching its own sharding. Every problem
// names the file and the tensor.
TrainingState load_checkpoint(const std::string& load_dir, model::ParameterSet& params,
                              optim::AdamWOptimizer* optimizer);

}  // namespace tessera::ckpt
