// Megatron-LM's saved random-number state (the "rng_state" entry of model_optim_rng.pt, torch_dist's
// rng_state ShardedObject): read on import and resume, written by `tessera convert --saver megatron`.
//
// Megatron's get_rng_state saves, per rank, a list (one entry, or one per data-parallel rank under
// --data-parallel-random-init) of dicts: Python's random.getstate(), numpy's np.random.get_state(), torch's
// CPU generator (torch.get_rng_state(), 5056 bytes), the CUDA generator (16 bytes: the Philox seed and
// offset) and the CUDA tracker's generators ({"data-parallel-rng", "model-parallel-rng",
// "expert-parallel-rng"}: 16 bytes each). _set_random_seed seeds them all with seed + 100 x pipeline rank
// (the tracker's with seed + 2718 + tensor rank, and seed + 1024 + 100 x expert rank + expert-tensor rank).
//
// Tessera's randomness is Philox keyed by (seed, iteration, element): it has no generator positions. So
// what maps is the seed: reading takes the CUDA generator's Philox seed of pipeline stage 0 (the seed the
// run's generators were last seeded with, which Megatron's own resume continues) as Tessera's seed; the
// positions (the Mersenne Twisters', the Philox offsets) are not carried, the iteration standing in for
// them. Writing gives each rank the states Megatron's _set_random_seed gives it for Tessera's seed, so
// that Megatron loading it with its RNG state draws as a fresh Megatron run of that seed would.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/megatron_args.h"
#include "ckpt/pickle_writer.h"
#include "ckpt/torch_file.h"

namespace tessera::ckpt {

class TorchSaveWriter;

// Reads `rng_state` (Megatron's list of dicts, or the dict itself; null when the checkpoint has none) of
// the file `where` (pipeline stage 0, tensor rank 0) into args.seed: the CUDA generator's seed, with a note
// in args.notes when it differs from the args' --seed (a run resumed with another --seed keeps drawing from
// its first seed's generators) or when the state is malformed (then the args' seed stays).
void read_megatron_rng_state(const StateNode* rng_state, const std::string& where, MegatronArgs& args);

// The rank's generators as Megatron's _set_random_seed(seed) leaves them, in get_rng_state's form: a list
// of one dict {random_rng_state, np_rng_state, torch_rng_state, cuda_rng_state, rng_tracker_states}. The
// byte tensors are storages of `writer`.
PickleOut megatron_rng_state(uint64_t seed, int64_t pipeline_rank, int64_t tensor_rank, int64_t expert_rank,
                             int64_t expert_tensor_rank, TorchSaveWriter& writer);

}  // namespace tessera::ckpt
