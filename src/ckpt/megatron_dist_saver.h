// A Tessera checkpoint written as Megatron-LM's torch_dist checkpoint (--ckpt-format torch_dist): the
// inverse of megatron_dist.h, for `tessera convert --saver megatron --ckpt-format torch_dist`.
//
//   OUT/latest_checkpointed_iteration.txt
//   OUT/iter_NNNNNNN/metadata.json    {"sharded_backend": "torch_dist", "common_backend": "torch", ...}
//   OUT/iter_NNNNNNN/common.pt        torch.save of {"args", "checkpoint_version": 3.0, "iteration"}
//   OUT/iter_NNNNNNN/.metadata        PyTorch DCP's metadata (dcp_writer.h)
//   OUT/iter_NNNNNNN/__R_0.distcp     the items rank R of a tensor T x pipeline P x expert E job writes
//                                     (R = t + T * (e + E * p))
//
// The keys are Megatron-Core's sharded state dict's, global and layout-free: the layers stacked under
// decoder.layers.<name> with the global layer as the leading axis (or, where Megatron-Core's rule says
// so, megatron_stacks_layers: an MoE model whose moe_layer_freq is a list or an interval above 1,
// decoder.layers.N.<name> each: its non-homogeneous layers), each tensor rank's shard a chunk at its offsets (SwiGLU's fc1 as its gate and
// its up chunk of [all gates; all ups]), replicated tensors once (tensor rank 0's); the experts as
// decoder.layers.mlp.experts.experts.<name> with the global expert the axis after the layers'; the
// vocabulary padded for the target tensor size; a tied model's output layer folded into the embedding (not
// saved). Each (pipeline, tensor[, expert]) rank's rng_state ShardedObject is Megatron's seeding of that
// rank for the checkpoint's seed (megatron_rng.h). A BERT's layers are BertModel's encoder.layers.*, its heads
// under their Megatron-Core names (the output bias split by vocabulary rows). Multi-token prediction's modules
// on the last stage as Megatron-Core's MTP block shards them: mtp.layers.K.{enorm,hnorm,eh_proj,final_layernorm}
// and the module's layer as mtp.layers.K.transformer_layer.<name>, never stacked (the block hands its layers no
// layer offset), its experts with the global expert the leading axis. Weights only: no optimizer state.
#pragma once

#include <string>
#include <vector>

#include "ckpt/megatron_saver.h"

namespace tessera::ckpt {

// Writes the latest checkpoint of `load_dir` into `save_dir` (which exists and is empty). Returns notes.
std::vector<std::string> export_megatron_dist(const std::string& load_dir, const std::string& save_dir,
                                              const MegatronSaveOptions& options);

}  // namespace tessera::ckpt
