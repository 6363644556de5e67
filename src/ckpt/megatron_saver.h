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
#include <vector>

namespace tessera::ckpt {

struct MegatronSaveOptions {
  int64_t tensor_parallel = 1, pipeline_parallel = 1;
  int64_t expert_parallel = 1;  // a mixture of experts: each expert rank's file holds E/ep of them
  // The legacy model's nested language_model.{embedding,encoder,output_layer} names instead of
  // Megatron-Core's local-spec ones.
  bool legacy_names = false;
};

// Writes the latest checkpoint of `load_dir` into `save_dir` (which exists and is empty). Returns notes
// for the user (what was not carried).
std::vector<std::string> export_megatron_legacy(const std::string& load_dir, const std::string& save_dir,
                                                const MegatronSaveOptions& options);

}  // namespace tessera::ckpt
