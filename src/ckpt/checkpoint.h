// Megatron's checkpoint layout with safetensors inside:
//   SAVE/latest_checkpointed_iteration.txt      the last complete iteration
//   SAVE/iter_0000100/model.tpXX.ppYY.safetensors   the dense parameter shards of tensor rank XX of
//                                                   pipeline stage YY, by name
//   SAVE/iter_0000100/model.etpXX.ppYY.epZZZ.safetensors  the expert parameters of expert rank ZZZ
//                                                   (its experts, named by their global index) at
//                                                   expert tensor rank XX of stage YY
//   SAVE/iter_0000100/optim.tpXX.ppYY.dpZZZ.safetensors  the dense parameters' Adam moments
//                                                   ("optimizer.exp_avg.NAME", ...): with AdamW all of
//                                                   them in dp000; with the distributed optimizer each
//                                                   data-parallel rank ZZZ writes the pieces it owns
//                                                   ("optimizer.exp_avg.NAME[begin:end]", element ranges
//                                                   of the rank's shard of the parameter)
//   SAVE/iter_0000100/optim.etpXX.ppYY.epZZZ.edpWWW.safetensors  the same for the expert parameters,
//                                                   by expert-data-parallel rank WWW (AdamW: edp000)
//   SAVE/iter_0000100/tokenizer/...            the run's tokenizer files (ckpt/checkpoint_tokenizer.h)
//   SAVE/iter_0000100/index.json                iteration, data position, RNG seed, arguments; every
//                                               file's size and CRC-32C; for every tensor its global
//                                               shape and the slices held by each file (view, split
//                                               dimension, offset, length, CRC-32C of the slice)
// Each slice is written once. Dense parameters (ParameterSpec::GradReduce::DataParallel): by
// data-parallel rank 0 of their (tensor, pipeline) group, one replicated over the tensor group by tensor
// rank 0 only. Expert parameters (GradReduce::ExpertDataParallel), which live on other dense
// coordinates (MoE parallel folding: expert rank 1 is another dense data-parallel rank): by
// expert-data-parallel rank 0 of their (expert tensor, expert, pipeline) group, one whole over the
// expert tensor group by expert tensor rank 0 only. The distributed optimizer's moments: in pieces, by
// the ranks that own them in the data group of their kind (the index lists a piece's element range; a
// bucket tail every rank owns by the group's rank 0). The last stage's copy of a tied embedding not at
// all (the first stage writes it).
//
// Loading reshards: each rank wants, for every parameter it holds, a range of the full tensor (its
// model::Sharding), and copies it together from whichever saved slices overlap it (ckpt/reshard.h),
// so a checkpoint saved at any tensor/pipeline/data-parallel/expert layout loads into any other (an
// expert's parameters are found by their global name whichever expert rank saved them). The word
// embedding and output layer, whose padded vocabulary depends on the tensor-parallel size, copy the rows
// both layouts have and keep the rest as initialised (Adam moments: zero). Every slice read is checked
// against its CRC-32C, and every file opened against its size and CRC-32C; a mismatch names the file
// and the tensor.
//
// A checkpoint is written into a temporary directory, its index written last, and the directory
// renamed into place only when complete, so a failed save never damages an earlier checkpoint.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/safetensors.h"
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
  nlohmann::json loss_scaler;  // optim::LossScaler::state() under loss scaling, else null
  // The samples of the skipped iterations, which a schedule in samples does not count (they differ from
  // skipped_iterations x global batch under a batch-size ramp); -1 where a checkpoint does not record them.
  int64_t skipped_train_samples = -1;
  // The tokenizer's files by their key in args ("vocab_file", ...; ckpt/checkpoint_tokenizer.h): on save
  // the files to copy into the checkpoint, on load the copies it carries (none in older checkpoints).
  std::map<std::string, std::string> tokenizer_files;
};

// "iter_0000100"
std::string iteration_dir_name(int64_t iteration);

// Where this rank's shards go: its tensor-parallel rank, pipeline stage and data-parallel rank name its
// dense files; its expert coordinates (comm::RankCoordinates etp, ep, edp) its expert files.
struct ShardPlacement {
  int tensor_rank = 0;
  int data_rank = 0;
  comm::ProcessGroup* world = nullptr;  // null for a single process
  int pipeline_rank = 0;
  int expert_tensor_rank = 0, expert_rank = 0, expert_data_rank = 0;
  // A rank-local checkpoint (--non-persistent-ckpt-type local): this rank writes every tensor it holds
  // (replicas and a tied copy included) and all of its optimizer state into a directory of its own
  // (world null there: no other rank takes part), so that it resumes from its own disk at the same layout.
  bool every_tensor = false;
};

// State beyond the parameters and their moments that one rank writes beside them (Ouroboros' weight
// versions and delayed gradients, train/ouroboros_checkpoint.cc): a safetensors file of its own, listed
// in the index with its size and CRC-32C, saved and swapped into place with the rest.
struct ExtraFile {
  std::string name;  // a plain file name, unique among the ranks
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;
};

// One save in three steps, so that the files can be written on another thread while training goes on
// (--async-save): the constructor and finalize() are collective and run on the training thread, write()
// is this rank's alone. save_checkpoint below is the three in a row; the files are the same either way.
class CheckpointSave {
 public:
  // Collective over placement.world: the leader (world rank 0) makes the temporary directory
  // `save_dir`/iter_N.tmp. Takes this rank's tensors to write: with own_copies into host buffers owned
  // by this save (training may change the live tensors while write() runs), else as they are on the
  // host (a tensor on a GPU is copied to the host either way). optimizer may be null (the weights alone).
  CheckpointSave(std::string save_dir, const TrainingState& state, const model::ParameterSet& params,
                 const optim::Optimizer* optimizer, const ShardPlacement& placement, int64_t keep_last,
                 const std::vector<ExtraFile>& extra, bool own_copies);
  CheckpointSave(const CheckpointSave&) = delete;
  CheckpointSave& operator=(const CheckpointSave&) = delete;

  // Writes this rank's files and its index fragment into the temporary directory, each synced to disk
  // (on the leader also the tokenizer's copies). No collective and no allocation of tensors: it may run on
  // another thread. after_file(path), when given, is called after each file is complete; what it throws
  // ends the write (a test's injected fault, a cancelled write). Errors are tessera::Errors naming the file.
  void write(const std::function<void(const std::string&)>& after_file = nullptr);
  // Collective over placement.world, once every rank's write() has completed: the leader merges the
  // fragments into the index (written last), renames the directory into place, then moves the tracker
  // and prunes (keep_last).
  void finalize();

  int64_t iteration() const { return state_.iteration; }
  const std::string& save_dir() const { return save_dir_; }
  // The bytes this rank's write() puts on disk in tensors (its host buffers, with own_copies).
  int64_t tensor_bytes() const;

 private:
  struct File {
    std::string name;
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::map<std::string, std::string> metadata;
  };
  struct Slice {  // one index entry: slice_entry() less its CRC-32C, which write() computes
    std::string tensor;
    nlohmann::json global_shape, entry;
    Tensor value;
  };
  std::string save_dir_;
  TrainingState state_;
  ShardPlacement placement_;
  int64_t keep_last_;
  bool leader_;
  int64_t optimizer_steps_ = 0;
  bool has_optimizer_ = false;
  std::vector<File> files_;  // model files, then optimizer files, then the extra files
  size_t model_files_ = 0;   // how many of files_ are model files (TESSERA_CKPT_CRASH_DURING_SAVE)
  std::vector<Slice> slices_;
  nlohmann::json tokenizer_files_;  // the leader's copies, made by write()
  bool written_ = false;
};

// Removes what saves killed part way left behind in `root` (iter_N.tmp, iter_N.old, the tracker's
// latest_checkpointed_iteration.txt.tmp.PID), then all but the
// newest `keep_last` complete iteration directories (keep_last 0: all of them stay).
void prune_checkpoints(const std::string& root, int64_t keep_last);

// Saves into `save_dir`/iter_XXXXXXX and then updates the tracker file. optimizer (AdamW or the
// distributed optimizer: its moments()) may be null.
// keep_last > 0: afterwards only the newest keep_last iteration directories are kept.
// extra: this rank's extra files.
// Collective over placement.world.
// Test hook: with TESSERA_CKPT_CRASH_DURING_SAVE=1 in the environment the process aborts after writing
// its model file, before the index (a crash mid-save).
void save_checkpoint(const std::string& save_dir, const TrainingState& state, const model::ParameterSet& params,
                     const optim::Optimizer* optimizer, const ShardPlacement& placement = {},
                     int64_t keep_last = 0, const std::vector<ExtraFile>& extra = {});

// An extra file of the latest checkpoint of `load_dir`, checked against the index's size and CRC-32C;
// an Error naming the directory and the file when the index lists no such file.
SafetensorsFile open_extra_file(const std::string& load_dir, const std::string& name);

// The iteration named by `load_dir`/latest_checkpointed_iteration.txt, or -1 when there is none.
int64_t latest_checkpointed_iteration(const std::string& load_dir);

// Whether `dir`/iter_N holds a complete checkpoint: its index, which a save writes last.
bool checkpoint_complete(const std::string& dir, int64_t iteration);

// Points the tracker of `dir` at `iteration`, a complete checkpoint there, and removes the iteration
// directories after it: rank-local checkpoints that not every rank completed (a job killed between the
// ranks' renames) give way to the newest one all ranks have.
void roll_back_checkpoints(const std::string& dir, int64_t iteration);

// Creates the --save directory if need be and checks that it can be written, so that an unusable
// --save (a file, a read-only or missing parent) stops the run before training, not at the first save.
// `flag` names the directory in the errors.
void prepare_save_directory(const std::string& save_dir, const std::string& flag = "--save");

// The "args" record of the latest checkpoint of `load_dir` (the model configuration among them).
nlohmann::json latest_checkpoint_args(const std::string& load_dir);

// The tokenizer files the latest checkpoint of `load_dir` carries, by key ("vocab_file", ...), each
// checked against the index; empty for a checkpoint saved before checkpoints carried them.
std::map<std::string, std::string> latest_tokenizer_files(const std::string& load_dir);

// The model tensors (no optimizer state) of the latest checkpoint of `load_dir`, by name.
std::vector<std::string> latest_model_tensor_names(const std::string& load_dir);

// Loads the latest checkpoint of `load_dir` into params (and the optimizer's moments and step count
// unless optimizer is null), resharding as needed: moments saved in pieces are assembled, so the
// distributed optimizer takes its shard from the full layout (DistributedOptimizer::load_full_state). Every problem names the file and the tensor.
TrainingState load_checkpoint(const std::string& load_dir, model::ParameterSet& params,
                              optim::AdamWOptimizer* optimizer);

// Every model tensor of the latest checkpoint of `load_dir` whole (gathered from its slices; no
// optimizer state), in the index's (name) order, and the checkpoint's training state.
std::vector<std::pair<std::string, Tensor>> load_full_model(const std::string& load_dir, TrainingState* state);

// Saves whole tensors as a one-process checkpoint without optimizer state (what `tessera convert`
// writes; `tessera train --load DIR --finetune` then trains it at any layout).
void save_full_model(const std::string& save_dir, const TrainingState& state,
                     const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace tessera::ckpt
