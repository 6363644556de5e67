#include "comm/nccl_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/check.h"

namespace tessera::comm {

namespace {

constexpr const char* kName = "libnccl.so.2";

void add_toolkit(std::vector<std::string>& out, const std::string& root) {
  out.push_back(root + "/lib64/" + kName);
  out.push_back(root + "/targets/x86_64-linux/lib/" + kName);
}

// lib/python3.*/site-packages/nvidia/nccl/lib/libnccl.so.2 under a Python environment, newest Python first
// (python3.12 before python3.9: compared by the minor number).
void add_wheels(std::vector<std::string>& out, const std::string& env) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::pair<int, std::string>> found;
  for (const auto& entry : fs::directory_iterator(fs::path(env) / "lib", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("python3.", 0) != 0) continue;
    const int minor = std::atoi(name.c_str() + 8);
    found.emplace_back(minor, (entry.path() / "site-packages/nvidia/nccl/lib" / kName).string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& f : found) out.push_back(f.second);
}

}  // namespace

std::vector<std::string> nccl_library_candidates(const std::function<const char*(const char*)>& getenv) {
  auto env = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v ? v : "";
  };
  if (std::string explicit_path = env("TESSERA_NCCL_LIBRARY"); !explicit_path.empty()) return {explicit_path};
  std::vector<std::string> out{kName};
  if (std::string cuda_home = env("CUDA_HOME"); !cuda_home.empty() && cuda_home != "/usr/local/cuda")
    add_toolkit(out, cuda_home);
  add_toolkit(out, "/usr/local/cuda");
  if (std::string venv = env("VIRTUAL_ENV"); !venv.empty() && venv != "/opt/torch/.venv") add_wheels(out, venv);
  add_wheels(out, "/opt/torch/.venv");
  return out;
}

const std::vector<std::string>& nccl_required_symbols() {
  static const std::vector<std::string> names{
      "ncclGetVersion",   "ncclGetUniqueId",   "ncclCommInitRank", "ncclCommDestroy",       "ncclCommAbort",
      "ncclCommGetAsyncError", "ncclGetErrorString", "ncclGetLastError", "ncclAllReduce", "ncclReduceScatter",
      "ncclAllGather",    "ncclBroadcast",     "ncclSend",         "ncclRecv",              "ncclGroupStart",
      "ncclGroupEnd"};
  return names;
}

void* NcclLibrary::symbol(const char* name) const {
  void* p = handle ? dlsym(handle, name) : nullptr;
  TESSERA_CHECK(p != nullptr, "NCCL: ", path.empty() ? "no library loaded" : path, " has no symbol ", name);
  return p;
}

NcclLibrary load_nccl_library(const std::vector<std::string>& candidates) {
  std::string tried;
  for (const std::string& candidate : candidates) {
    dlerror();
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      tried += str_cat("\n  ", candidate, ": ", why ? why : "dlopen failed");
      continue;
    }
    std::string missing;
    for (const std::string& name : nccl_required_symbols())
      if (!dlsym(handle, name.c_str())) missing += (missing.empty() ? "" : ", ") + name;
    if (!missing.empty()) {
      tried += str_cat("\n  ", candidate, ": loaded, but lacks ", missing, " (an NCCL older than 2.13?)");
      dlclose(handle);
      continue;
    }
    NcclLibrary lib{handle, candidate, 0};
    using GetVersion = int (*)(int*);  // ncclResult_t ncclGetVersion(int*), ncclSuccess == 0
    int version = 0;
    if (reinterpret_cast<GetVersion>(lib.symbol("ncclGetVersion"))(&version) == 0) lib.version = version;
    return lib;
  }
  throw Error(str_cat("NCCL (libnccl.so.2) could not be loaded; searched, in order:", tried,
                      "\nset TESSERA_NCCL_LIBRARY to its path, or add its folder to LD_LIBRARY_PATH"));
}

std::string nccl_version_string(int version) {
  if (version < 10000) return str_cat(version / 1000, ".", version % 1000 / 100, ".", version % 100);  // before 2.9
  return str_cat(version / 10000, ".", version % 10000 / 100, ".", version % 100);
}

}  // namespace tessera::comm
