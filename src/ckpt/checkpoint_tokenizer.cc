#include "ckpt/checkpoint_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "ckpt/crc32c.h"
#include "core/check.h"

namespace tessera::ckpt {
namespace fs = std::filesystem;

namespace {
// "vocab_file" -> "--vocab-file", the flag a user gives.
std::string flag_of(const std::string& key) {
  std::string flag = "--" + key;
  for (char& c : flag)
    if (c == '_') c = '-';
  return flag;
}
}  // namespace

nlohmann::json copy_tokenizer_files(const std::string& checkpoint_dir, const std::map<std::string, std::string>& files) {
  nlohmann::json entry = nlohmann::json::object();
  std::set<std::string> names;
  for (const auto& [key, path] : files) {
    if (path.empty()) continue;
    std::error_code ec;
    TESSERA_CHECK(fs::is_regular_file(path, ec), flag_of(key), "=", path,
                  ": the tokenizer file to carry in the checkpoint is missing or not a regular file");
    // The file's own name, unless two flags' files share it (then prefixed by the key).
    std::string name = fs::path(path).filename().string();
    if (!names.insert(name).second) names.insert(name = key + "." + name);
    const fs::path dir = fs::path(checkpoint_dir) / "tokenizer";
    fs::create_directories(dir);
    fs::copy_file(path, dir / name, fs::copy_options::overwrite_existing, ec);
    TESSERA_CHECK(!ec, flag_of(key), "=", path, ": cannot copy it into the checkpoint (", (dir / name).string(),
                  "): ", ec.message());
    entry[key] = {{"file", "tokenizer/" + name},
                  {"bytes", fs::file_size(dir / name)},
                  {"crc32c", crc32c_str(crc32c_file((dir / name).string()))}};
  }
  return entry;
}

std::map<std::string, std::string> carried_tokenizer_files(const std::string& checkpoint_dir,
                                                           const CheckpointIndex& index) {
  std::map<std::string, std::string> out;
  for (const auto& [key, t] : index.tokenizer_files) {
    const fs::path p = fs::absolute(fs::path(checkpoint_dir) / t.file);
    std::error_code ec;
    TESSERA_CHECK(fs::is_regular_file(p, ec), "checkpoint file ", p.string(), " (its tokenizer's ", flag_of(key),
                  ") is missing");
    TESSERA_CHECK(fs::file_size(p) == t.saved.bytes, "checkpoint file ", p.string(), " has ", fs::file_size(p),
                  " bytes, the index says ", t.saved.bytes, " (truncated or overwritten)");
    const uint32_t crc = crc32c_file(p.string());
    TESSERA_CHECK(!t.saved.crc32c || crc == *t.saved.crc32c, "checkpoint file ", p.string(), " is corrupt: its checksum is ",
                  crc32c_str(crc), ", the index says ", crc32c_str(*t.saved.crc32c));
    out[key] = p.string();
  }
  return out;
}

bool same_file_contents(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::file_size(a, ec) != fs::file_size(b, ec) || ec) return false;
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  return std::equal(std::istreambuf_iterator<char>(fa), std::istreambuf_iterator<char>(),
                    std::istreambuf_iterator<char>(fb), std::istreambuf_iterator<char>());
}

}  // namespace tessera::ckpt
