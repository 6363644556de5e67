// The tokenizer files a checkpoint carries, so that it is self-contained: generate, serve, eval, convert
// and a resume need no path of the machine (or the directory) that trained it, and a resume can tell
// whether the vocabulary given is the one the model was trained with.
//   SAVE/iter_0000100/tokenizer/gpt2-vocab.json   copies of the run's --vocab-file, --merge-file,
//   SAVE/iter_0000100/tokenizer/gpt2-merges.txt   --tokenizer-model (file names kept), listed in
//                                                 index.json's "tokenizer_files" by the flag's key with
//                                                 their size and CRC-32C
//   SAVE/iter_0000100/tokenizer/tokenizer_config.json  an imported Hugging Face model's (key
//                                                 "tokenizer_config"), for `serve --chat-template auto`
// Checkpoints saved before this have none; their "args" name the files as the run was given them.
// ckpt::latest_tokenizer_files (ckpt/checkpoint.h) reads a --load directory's.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_index.h"

namespace tessera::ckpt {

// The keys of the tokenizer's files in a checkpoint's args, as Megatron's flags name them.
inline constexpr const char* kTokenizerFileKeys[] = {"vocab_file", "merge_file", "tokenizer_model"};

// Copies `files` (key -> path; empty paths skipped) into `checkpoint_dir`/tokenizer/ and returns the
// index's "tokenizer_files" entry for them. An unreadable file is an Error naming its flag and path.
nlohmann::json copy_tokenizer_files(const std::string& checkpoint_dir, const std::map<std::string, std::string>& files);

// The carried files of a checkpoint directory whose index is `index`: key -> path of the copy, each
// checked against the index's size and CRC-32C (a damaged copy is an Error naming it).
std::map<std::string, std::string> carried_tokenizer_files(const std::string& checkpoint_dir,
                                                           const CheckpointIndex& index);

// Whether two files hold the same bytes.
bool same_file_contents(const std::string& a, const std::string& b);

}  // namespace tessera::ckpt
