// Megatron-LM's legacy checkpoint format (--ckpt-format torch) read into a Tessera checkpoint, for GPT
// models (GPT-2 style and Llama style, mixtures of experts) and BERT (told by its keys), without Python:
//
//   DIR/latest_checkpointed_iteration.txt         "1000" or "release"
//   DIR/iter_0001000/mp_rank_TT/model_optim_rng.pt        tensor rank TT (no pipeline parallelism)
//   DIR/iter_0001000/mp_rank_TT_PPP/model_optim_rng.pt    tensor rank TT of pipeline stage PPP
//   DIR/release/...                                the same for a release checkpoint (iteration 0)
//
// Each file is a torch.save archive of {"model": state dict, "args": argparse.Namespace, "iteration",
// "checkpoint_version", optimizer and RNG state}; with an interleaved pipeline the chunks are "model0",
// "model1", .... The state dict uses Megatron-Core's names (decoder.layers.N.self_attention.linear_qkv.
// weight, with Transformer Engine's fused norms as linear_qkv.layer_norm_weight and
// linear_fc1.layer_norm_weight) or the legacy model's nested language_model.{embedding,encoder,
// output_layer} with query_key_value, dense, dense_h_to_4h, dense_4h_to_h and input_norm /
// post_attention_norm (older: *_layernorm, "attention", "transformer"). Layer indices are local to a
// pipeline chunk; the chunks are placed in Megatron's order (chunk v of every stage before chunk v + 1)
// each after the layers of those before it, so uneven splits need no rule.
//
// Tensor-parallel shards are merged as Megatron's own converters (tools/checkpoint/loader_*.py) merge
// them: column-parallel weights (QKV, fc1, the vocabulary-parallel embedding and output layer) along
// rows, row-parallel ones (the attention projection, fc2) along columns, the rest taken from rank 0.
// Concatenated shards of the fused QKV are already Tessera's layout (per query group: its query heads,
// then its key and value head), since each rank holds whole query groups. SwiGLU's fc1 shard is
// [gate shard; up shard], so the gates of all ranks come first, then the ups: Tessera's [gate; up].
// Tensors (fp32, bf16 or fp16) are widened to fp32, the master weights a Tessera checkpoint holds.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/megatron_args.h"
#include "ckpt/torch_file.h"
#include "model/config.h"

namespace tessera::ckpt {

// The iteration directory of a Megatron checkpoint directory (--save): `step` when >= 0 (Megatron's
// --ckpt-step), else the one latest_checkpointed_iteration.txt names ("release" or a number).
struct MegatronIteration {
  std::string load_dir;
  std::string iteration_dir;  // DIR/iter_0001000 or DIR/release
  int64_t iteration = 0;      // 0 for a release checkpoint
  bool release = false;
};
MegatronIteration find_megatron_iteration(const std::string& load_dir, int64_t step);
// Its format: "torch_dist" (metadata.json and PyTorch DCP's .metadata: megatron_dist.h) or "torch" (the
// legacy mp_rank_* directories of torch.save files).
std::string megatron_checkpoint_format(const MegatronIteration& iteration);

// One iteration of a legacy checkpoint directory, found and its first file read.
struct MegatronLegacyCheckpoint {
  std::string load_dir;
  std::string iteration_dir;  // DIR/iter_0001000 or DIR/release
  int64_t iteration = 0;      // 0 for a release checkpoint
  int64_t tensor_parallel = 1, pipeline_parallel = 1;
  int64_t expert_parallel = 1;
  std::vector<std::vector<std::string>> files;  // [pipeline stage][tensor rank]: model_optim_rng.pt (expert rank 0)
  // Mixture of experts: [pipeline stage][tensor rank][expert rank - 1], the other expert ranks' files (each
  // holds the dense tensors again, and its own experts under local numbers).
  std::vector<std::vector<std::vector<std::string>>> expert_files;
  StateNode first;   // the whole of files[0][0] (read once: its args decide the model)
  MegatronArgs args;  // of files[0][0]
};

// Finds the iteration to read: `step` when >= 0 (Megatron's --ckpt-step), else the one
// latest_checkpointed_iteration.txt names. Every tensor and stage rank's file must be there; the
// layout the directories show must be the one the args record.
MegatronLegacyCheckpoint open_megatron_legacy(const std::string& load_dir, int64_t step);

// Whole fp32 tensors read from a Megatron checkpoint, by Tessera name: the weights and, when asked for,
// Adam's moments (empty when the checkpoint holds none). With fp32 master weights saved beside bf16/fp16
// weights (the optimizer's), the weights are the masters.
struct MegatronTensors {
  model::ModelConfig config;  // the config given, with the padded vocabulary filled in where it was 0
  std::vector<std::pair<std::string, Tensor>> model, exp_avg, exp_avg_sq;
  int64_t optimizer_steps = -1;  // -1: not recorded
  std::vector<std::string> notes;
};

// Reads and merges the shards as import_megatron_legacy does, without saving; with `optimizer` also the
// moments (megatron_optimizer.h), merged as their weights are; a file without them is an error naming it.
MegatronTensors read_megatron_legacy(MegatronLegacyCheckpoint checkpoint, const model::ModelConfig& config,
                                     bool optimizer);

// Merges the shards into whole tensors for `config` (the checkpoint's args with any flags given on the
// command line), checks every shard's shape against it and that every tensor is used (an error names
// the file and the Megatron key), and saves them as a Tessera checkpoint at the checkpoint's iteration,
// with its consumed samples, seed and tokenizer. Returns notes on what converted but not exactly (a tied
// model's last-stage copy of the embeddings that differs from them).
std::vector<std::string> import_megatron_legacy(MegatronLegacyCheckpoint checkpoint, const model::ModelConfig& config,
                                                const std::string& save_dir);

// Shared with the torch_dist importer (megatron_dist.cc); defined in megatron_import.cc.
// A stored weight (fp32, bf16 or fp16) as fp32, the master weights a Tessera checkpoint holds; an error
// names the file and key of any other type.
Tensor megatron_to_fp32(const Tensor& t, const std::string& file, const std::string& key);
// The note for a tied model's last-stage copy of the word embeddings that differs from them (empty when
// equal); a copy of another shape is an error. `what`: the copied embedding, as the note names it (the
// position embedding for multi-token prediction's copy of learned absolute positions).
std::string megatron_tied_copy_note(const Tensor& copy, const Tensor& embedding, const std::string& key,
                                    const std::string& file, const std::string& what = "tied word embeddings");
// Saves whole fp32 tensors as a Tessera checkpoint at `iteration`, with the consumed samples, seed,
// tokenizer and precision Megatron's args record, and `converted_from` in the run's args.
void save_megatron_import(const std::string& save_dir, const model::ModelConfig& c, const MegatronArgs& a,
                          int64_t iteration, const nlohmann::json& converted_from,
                          const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace tessera::ckpt
