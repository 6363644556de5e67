// Resuming a Megatron-LM run from its own checkpoint directory (tessera train --load MEGATRON_DIR), legacy
// torch or torch_dist: checkpoint.h's readers (load_checkpoint, latest_checkpoint_args, ...) call these for
// a directory that holds a Megatron checkpoint, so that --load takes it as it takes a Tessera one.
//
// The model is the checkpoint's saved args (megatron_args.h), which --load then checks the flags against
// as for a Tessera checkpoint. Loading reads every rank's files (megatron_legacy.h, megatron_dist.h) into
// whole fp32 tensors in memory, the weights and Adam's moments (megatron_optimizer.h), and copies each
// parameter's part (its tensor-parallel shard, its layers' stage) out of them, so any source layout
// resumes at any Tessera one. Memory: each process holds the whole model and its two moments in fp32
// while it loads. Carried: the iteration, consumed samples, the seed (Tessera's RNG state: its randomness
// is keyed by seed and iteration; Megatron's saved generator states have no meaning here), the optimizer's
// step count and moments and the fp32 master weights where saved.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/megatron_args.h"

namespace tessera::ckpt {

// Whether `load_dir` holds a Megatron-LM checkpoint: its tracker names an iteration directory (or release/)
// with mp_rank_* directories or Megatron's metadata.json / DCP .metadata, and no Tessera index.
bool is_megatron_checkpoint(const std::string& load_dir);

// The iteration the tracker names (0 for "release").
int64_t megatron_checkpoint_iteration(const std::string& load_dir);

// The args record a Tessera checkpoint of it would hold ("model", the tokenizer, "converted_from").
nlohmann::json megatron_checkpoint_args(const std::string& load_dir);

// The model tensors it holds, by Tessera name.
std::vector<std::string> megatron_checkpoint_tensor_names(const std::string& load_dir);

// The tokenizer files its args name that exist on this machine, by key ("vocab_file", ...).
std::map<std::string, std::string> megatron_checkpoint_tokenizer_files(const std::string& load_dir);

// Loads it into params and, unless null, the optimizer's moments and step count (an error names the
// file when the checkpoint has no optimizer state); the training state as load_checkpoint's.
TrainingState load_megatron_checkpoint(const std::string& load_dir, model::ParameterSet& params,
                                       optim::AdamWOptimizer* optimizer);

// The vocabulary of the args' tokenizer, where Tessera can build it from the files the args name, into
// c.vocab_size (else the padded size stays, with a note).
void resolve_megatron_vocab_size(const MegatronArgs& a, model::ModelConfig& c, std::vector<std::string>& notes);

}  // namespace tessera::ckpt
