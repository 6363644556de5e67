// The index.json of a checkpoint directory, parsed and validated before anything is read: every
// field present and of the right type, file names plain names listed in "files", every slice a
// well-formed box (ckpt/reshard.h) of its tensor's global shape. Malformed input (hostile or damaged)
// is an Error naming the index file and the entry, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/reshard.h"

namespace tessera::ckpt {

struct SavedFile {
  uint64_t bytes = 0;
  std::optional<uint32_t> crc32c;  // absent in version-1 checkpoints
};

struct SavedSlice {
  std::string file, key;  // where it is: tensor `key` of safetensors file `file`
  Shape shape;            // as stored in the file (the box's elements, in the rank's tensor shape)
  Box box;                // which part of the tensor it is
  // Elements [first, second) of the box's row-major storage when the box was saved in pieces (the
  // distributed optimizer's moments, each data-parallel rank writing its own); absent: the whole box.
  std::optional<std::pair<int64_t, int64_t>> piece;
  std::optional<uint32_t> crc32c;
};

struct SavedTensor {
  Shape global_shape;
  std::vector<SavedSlice> slices;
};

// A tokenizer file the checkpoint carries (ckpt/checkpoint_tokenizer.h): "tokenizer/NAME" in its directory.
struct SavedTokenizerFile {
  std::string file;
  SavedFile saved;
};

struct CheckpointIndex {
  int version = 0;
  int64_t iteration = 0, consumed_train_samples = 0, skipped_iterations = 0;
  int64_t skipped_train_samples = -1;  // optional: -1 where absent
  uint64_t seed = 0;
  int64_t optimizer_steps = 0;
  bool has_optimizer = false;
  nlohmann::json args;
  nlohmann::json loss_scaler;  // optional: the loss scaler's state (null when the run had none)
  std::map<std::string, SavedFile> files;
  std::map<std::string, SavedTensor> tensors;
  // By the flag's key in args ("vocab_file", "merge_file", "tokenizer_model"); optional (older: none).
  std::map<std::string, SavedTokenizerFile> tokenizer_files;
};

constexpr int kCheckpointIndexVersion = 2;
// A save directory's tracker (Megatron's name), and each iteration directory's index, written last.
constexpr const char* kTrackerFile = "latest_checkpointed_iteration.txt";
constexpr const char* kIndexFile = "index.json";

// Parses the text of `path` (named in errors).
CheckpointIndex parse_checkpoint_index(const std::string& text, const std::string& path);

// "crc32c:1a2b3c4d" -> the value; nullopt if malformed.
std::optional<uint32_t> parse_crc32c(const std::string& s);

}  // namespace tessera::ckpt
