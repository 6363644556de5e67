// A Tessera checkpoint written as Megatron-LM's legacy checkpoint (--ckpt-format torch), for GPT and BERT
// models: the inverse of megatron_legacy.h, read back by torch.load, by Megatron and by
// `tessera convert --loader megatron`.
//
//   OUT/latest_checkpointed_iteration.txt
//   OUT/iter_NNNNNNN/mp_rank_TT/model_optim_rng.pt          (pipeline size 1)
//   OUT/iter_NNNNNNN/mp_rank_TT_PPP/model_optim_rng.pt      (tensor rank TT of stage PPP)
//
// Each file holds {"args": argparse.Namespace of the model's Megatron arguments, "checkpoint_version":
// 3.0, "iteration", "model": the stage's state dict for its tensor rank, "rng_state": the rank's generators
// as Megatron seeds them for the checkpoint's seed (megatron_rng.h)}: no optimizer state (Megatron loads it
// with --no-load-optim, or --finetune). Tensors are
// split as Megatron's model holds them (megatron_split: QKV per query group, SwiGLU's gate and up halves
// per rank, the vocabulary-parallel embedding and output layer by rows) and the vocabulary is padded as
// Megatron pads it for the target tensor size (--make-vocab-size-divisible-by x tp; rows Tessera did not
// have are zeros). Layers are split evenly over the stages, their indices local to the stage. A mixture of
// experts (Megatron-Core's MoE layers, the same number of experts in each) is written as its expert ranks
// save it: mp_rank_TT[_PPP]_EEE, each holding the dense tensors and its E/ep experts under SequentialMLP's
// local numbers (mlp.experts.local_experts.L), split over the tensor ranks as a dense MLP, with the
// --num-experts and --moe-* args. Stored
// as bf16 (fp16) for a checkpoint of a --bf16 (--fp16) run, as Megatron's model parameters are, else fp32.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/megatron_names.h"
#include "ckpt/pickle_writer.h"
#include "core/tensor.h"
#include "model/config.h"

namespace tessera::ckpt {

struct MegatronSaveOptions {
  int64_t tensor_parallel = 1, pipeline_parallel = 1;
  int64_t expert_parallel = 1;  // a mixture of experts: each expert rank's file holds E/ep of them
  // The legacy model's nested language_model.{embedding,encoder,output_layer} names instead of
  // Megatron-Core's local-spec ones.
  bool legacy_names = false;
  // Megatron's --ckpt-format torch_dist (megatron_dist_saver.h) instead of the legacy torch format.
  bool torch_dist = false;
};

// What both formats write: the latest checkpoint of `load_dir` checked against the target layout (errors
// name the flag and the rule), its tensors whole in fp32 in the model's declaration order, the vocabulary
// padded as Megatron pads it for the target tensor size, and Megatron's args for that layout and format.
struct MegatronExport {
  model::ModelConfig config;
  TrainingState state;
  int64_t tp = 1, pp = 1, ep = 1, padded_vocab = 0;
  int64_t experts = 0;  // per MoE layer (0: a dense model)
  DType stored = DType::F32;
  std::vector<std::pair<std::string, Tensor>> tensors;
  PickleOut args;  // an argparse.Namespace
};
MegatronExport prepare_megatron_export(const std::string& load_dir, const MegatronSaveOptions& options);

// Megatron's args.moe_layer_freq as an interval: the N (the smallest) for which Megatron's int form (layer i
// an MoE layer when i % N == 0) gives the MoE layers of `m`'s first num_layers layers (1: every layer);
// 0 when only its list form does (a dense first layer, an irregular pattern) or the model is dense. Both
// savers write the int where there is one, else the list.
int64_t megatron_moe_interval(const model::MoeConfig& m, int64_t num_layers);
// Megatron-Core's rule for the decoder's keys in a torch_dist checkpoint (TransformerBlock.
// sharded_state_dict): one key per layer, decoder.layers.N.*, when moe_layer_freq is a list or an int
// above 1 (non_homogeneous_layers), else the layers stacked on a leading axis, decoder.layers.*. So a
// dense model and an MoE model with every layer MoE (moe_layer_freq 1) stack; any other MoE pattern does
// not. (Megatron-Core since 2024-12-12; from 2024-12-07 to then any MoE model had per-layer keys, and
// before, every model stacked. Tessera's reader takes either.)
bool megatron_stacks_layers(const model::ModelConfig& c);

// Rank `rank` of `ranks`'s shard of a whole fp32 tensor split as `split` (megatron_names.h): the inverse
// of the readers' merge.
Tensor megatron_tensor_shard(const Tensor& whole, MegatronSplit split, int64_t rank, int64_t ranks);

// Writes the latest checkpoint of `load_dir` into `save_dir` (which exists and is empty). Returns notes
// for the user (what was not carried).
std::vector<std::string> export_megatron_legacy(const std::string& load_dir, const std::string& save_dir,
                                                const MegatronSaveOptions& options);

}  // namespace tessera::ckpt
