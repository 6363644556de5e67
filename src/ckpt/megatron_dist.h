// Megatron-LM's torch_dist checkpoint format (--ckpt-format torch_dist, its default since 2024) read into a
// Tessera checkpoint, for GPT models (GPT-2 style and Llama style, mixtures of experts) and BERT, without Python:
//
//   DIR/latest_checkpointed_iteration.txt      "1000" or "release"
//   DIR/iter_0001000/metadata.json             {"sharded_backend": "torch_dist", "common_backend": "torch", ...}
//   DIR/iter_0001000/common.pt                 torch.save of what is not sharded: args (argparse.Namespace),
//                                              iteration, checkpoint_version, the scheduler's state, ...
//   DIR/iter_0001000/.metadata, __R_I.distcp   a PyTorch DCP checkpoint of the sharded state (dcp_reader.h)
//
// The DCP keys are global and independent of the layout that saved them: Megatron-Core's sharded state
// dict stacks a GPT's layers, so "decoder.layers.mlp.linear_fc1.weight" is one tensor [num_layers, ...]
// whose leading index is the global layer, and each tensor-parallel shard of a layer is a chunk at its
// offsets. The assembled tensors are therefore Megatron's whole tensors, laid out as the legacy
// loader's merge makes them: the fused QKV per query group, SwiGLU's fc1 as [all gates; all ups] (Megatron
// saves the gate and up halves of each rank as separate chunks at those offsets, or, with
// singleton_local_shards, as the keys "..._w" and "..._v"). Key names map to Tessera's as megatron_names.h
// maps the legacy ones (Transformer Engine's fused norms included).
// The experts' keys are SequentialMLP's whichever MLP class saved them (Transformer Engine's grouped GEMM makes
// its own so): "decoder.layers.mlp.experts.experts.linear_fc1.weight" [num_layers, num_experts, ...], or one key
// per global expert G under singleton_local_shards ("...experts.experts.G.linear_fc1.weight"); a BERT stacks
// "encoder.layers.*". A multi-token prediction module's layer is never stacked: "mtp.layers.K.transformer_layer.*",
// its experts "...transformer_layer.mlp.experts.experts.<name>" with the experts' axis leading. What is not a model
// weight is left:
// optimizer.* entries (read by read_megatron_dist for tessera train --load), ShardedObjects (Transformer Engine's
// _extra_state, rng_state), and the common state besides the args and iteration.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/dcp_reader.h"
#include "ckpt/megatron_args.h"
#include "ckpt/megatron_legacy.h"
#include "model/config.h"

namespace tessera::ckpt {

struct MegatronDistCheckpoint {
  std::string load_dir, iteration_dir, common_file;
  int64_t iteration = 0;  // 0 for a release checkpoint
  DcpCheckpoint dcp;
  MegatronArgs args;  // common.pt's
  int64_t optimizer_steps = -1;  // common.pt's optimizer step count (-1: none recorded)
};

// Finds the iteration as the legacy format does, checks metadata.json (a backend other than torch_dist,
// such as the removed zarr, is refused by name), reads the args from common.pt and opens the DCP metadata.
MegatronDistCheckpoint open_megatron_dist(const std::string& load_dir, int64_t step);

// Assembles the whole tensors of `config` (the args with any flags given), checks each against the model
// (an error names .metadata and the key, with the shape recorded and the shape expected) and that every
// model tensor is used, and saves them as a Tessera checkpoint at the checkpoint's iteration, as
// import_megatron_legacy does. Returns notes.
// Reads the whole tensors as import_megatron_dist does, without saving; with `optimizer` also Adam's
// moments ("optimizer.state.exp_avg.<key>", "optimizer.state.exp_avg_sq.<key>", assembled as their
// weights are) and, where saved, the fp32 master weights in place of the weights
// ("optimizer.state.fp32_param.<key>", or "optimizer.state.param.<key>" from the distributed optimizer's
// fully reshardable format). A model tensor without its moments is an error naming the key missing.
MegatronTensors read_megatron_dist(const MegatronDistCheckpoint& checkpoint, const model::ModelConfig& config,
                                   bool optimizer);

std::vector<std::string> import_megatron_dist(const MegatronDistCheckpoint& checkpoint, const model::ModelConfig& config,
                                              const std::string& save_dir);

}  // namespace tessera::ckpt
