// The tokenizer of a Hugging Face model directory, both ways, so that an export is usable as it is
// (AutoTokenizer.from_pretrained reads it) and an import generates without tokenizer flags:
//   GPT2BPETokenizer                 vocab.json + merges.txt    GPT2Tokenizer
//   BertWordPieceLowerCase / Case    vocab.txt                  BertTokenizer (do_lower_case)
//   SentencePiece types              tokenizer.model            LlamaTokenizer (BOS added for Llama2Tokenizer)
// with tokenizer_config.json naming the class. The NullTokenizer has no files and writes none.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"

namespace tessera::ckpt {

// Writes the tokenizer of the checkpoint `state` (its carried files, else the paths its args record, when
// they exist) into `out_dir`, and returns `args` with the file flags naming the files written there
// (plain names: an export holds no path of the machine that made it). Nothing is written when the
// checkpoint has no tokenizer files to read (a NullTokenizer, or an older checkpoint moved away).
nlohmann::json export_hf_tokenizer(const std::filesystem::path& out_dir, const TrainingState& state,
                                   nlohmann::json args, int64_t model_max_length);

// The tokenizer of Hugging Face directory `hf_dir` for an import: the files to carry into the checkpoint
// (TrainingState::tokenizer_files) and `args` with the tokenizer's type and files. The type is
// tessera_args' when the export was Tessera's, else told by the files and tokenizer_config.json; `args`
// is returned unchanged when the directory has no tokenizer Tessera reads. The directory's
// tokenizer_config.json is carried too (key "tokenizer_config"), for its chat_template.
nlohmann::json import_hf_tokenizer(const std::filesystem::path& hf_dir, nlohmann::json args,
                                   std::map<std::string, std::string>* carried);

}  // namespace tessera::ckpt
