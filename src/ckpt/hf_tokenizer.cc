#include "ckpt/hf_tokenizer.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "core/check.h"
#include "core/file_io.h"

namespace tessera::ckpt {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct HfTokenizerFile {
  const char* key;      // in a checkpoint's args: "vocab_file", "merge_file", "tokenizer_model"
  const char* hf_name;  // in a Hugging Face directory
};

// The files of a Tessera tokenizer type in a Hugging Face directory (empty: none, or a type without files).
std::vector<HfTokenizerFile> hf_files(const std::string& type) {
  if (type == "GPT2BPETokenizer") return {{"vocab_file", "vocab.json"}, {"merge_file", "merges.txt"}};
  if (type == "BertWordPieceLowerCase" || type == "BertWordPieceCase") return {{"vocab_file", "vocab.txt"}};
  if (type == "SentencePieceTokenizer" || type == "GPTSentencePieceTokenizer" || type == "Llama2Tokenizer")
    return {{"tokenizer_model", "tokenizer.model"}};
  return {};
}

json tokenizer_config(const std::string& type, int64_t model_max_length) {
  json c = {{"model_max_length", model_max_length}};
  if (type == "GPT2BPETokenizer") {
    c["tokenizer_class"] = "GPT2Tokenizer";
    c["bos_token"] = c["eos_token"] = c["unk_token"] = "<|endoftext|>";
  } else if (type == "BertWordPieceLowerCase" || type == "BertWordPieceCase") {
    c["tokenizer_class"] = "BertTokenizer";
    c["do_lower_case"] = type == "BertWordPieceLowerCase";
  } else {
    c["tokenizer_class"] = "LlamaTokenizer";
    c["add_bos_token"] = type == "Llama2Tokenizer";
    c["add_eos_token"] = false;
  }
  return c;
}

std::string read_json_field(const fs::path& path, const char* field) {
  std::ifstream in(path);
  if (!in) return "";
  try {
    const json j = json::parse(in);
    return j.contains(field) && j[field].is_string() ? j[field].get<std::string>() : "";
  } catch (const json::exception&) {
    return "";
  }
}

// What a Hugging Face directory not exported by Tessera holds: the Tessera type its files are read by.
std::string infer_type(const fs::path& dir) {
  const std::string model_type = read_json_field(dir / "config.json", "model_type");
  if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt") && model_type == "gpt2") return "GPT2BPETokenizer";
  if (fs::exists(dir / "tokenizer.model") && (model_type == "llama" || model_type == "mixtral")) return "Llama2Tokenizer";
  if (fs::exists(dir / "vocab.txt") && (model_type == "bert" || model_type == "megatron-bert")) {
    std::ifstream in(dir / "tokenizer_config.json");
    bool lower = true;  // BertTokenizer's default
    try {
      if (in) {
        const json j = json::parse(in);
        if (j.contains("do_lower_case") && j["do_lower_case"].is_boolean()) lower = j["do_lower_case"].get<bool>();
      }
    } catch (const json::exception&) {
    }
    return lower ? "BertWordPieceLowerCase" : "BertWordPieceCase";
  }
  return "";
}

}  // namespace

json export_hf_tokenizer(const fs::path& out_dir, const TrainingState& state, json args, int64_t model_max_length) {
  const std::string type = args.value("tokenizer_type", std::string());
  const std::vector<HfTokenizerFile> files = hf_files(type);
  std::map<std::string, std::string> sources;
  for (const HfTokenizerFile& f : files) {
    const auto carried = state.tokenizer_files.find(f.key);
    const std::string recorded = args.value(f.key, std::string());
    std::error_code ec;
    if (carried != state.tokenizer_files.end()) sources[f.key] = carried->second;
    else if (!recorded.empty() && fs::is_regular_file(recorded, ec)) sources[f.key] = recorded;
  }
  if (files.empty() || sources.size() != files.size()) return args;
  for (const HfTokenizerFile& f : files) {
    fs::copy_file(sources[f.key], out_dir / f.hf_name, fs::copy_options::overwrite_existing);
    args[f.key] = f.hf_name;
  }
  write_file_atomically((out_dir / "tokenizer_config.json").string(), tokenizer_config(type, model_max_length).dump(2) + "\n");
  return args;
}

json import_hf_tokenizer(const fs::path& hf_dir, json args, std::map<std::string, std::string>* carried) {
  std::string type = args.value("tokenizer_type", std::string());
  if (hf_files(type).empty()) type = infer_type(hf_dir);
  const std::vector<HfTokenizerFile> files = hf_files(type);
  for (const HfTokenizerFile& f : files)
    if (!fs::is_regular_file(hf_dir / f.hf_name)) return args;
  if (files.empty()) return args;
  args["tokenizer_type"] = type;
  for (const HfTokenizerFile& f : files) {
    const std::string path = fs::absolute(hf_dir / f.hf_name).string();
    args[f.key] = path;
    (*carried)[f.key] = path;
  }
  // Its configuration too, for the chat template it may hold (tessera serve --chat-template auto).
  if (fs::is_regular_file(hf_dir / "tokenizer_config.json"))
    (*carried)["tokenizer_config"] = fs::absolute(hf_dir / "tokenizer_config.json").string();
  return args;
}

}  // namespace tessera::ckpt
