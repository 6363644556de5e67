#include "kernels/cudnn_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "core/check.h"

namespace tessera::kernels {

namespace {

constexpr const char* kName = "libcudnn.so.9";
constexpr size_t kMinimumVersion = 90000;  // the backend API's SDPA graphs as built here: cuDNN 9

void add_toolkit(std::vector<std::string>& out, const std::string& root) {
  out.push_back(root + "/lib64/" + kName);
  out.push_back(root + "/lib/" + kName);
  out.push_back(root + "/targets/x86_64-linux/lib/" + kName);
}

// lib/python3.*/site-packages/nvidia/cudnn/lib/libcudnn.so.9 under a Python environment, newest Python
// first (python3.12 before python3.9: compared by the minor number).
void add_wheels(std::vector<std::string>& out, const std::string& env) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::pair<int, std::string>> found;
  for (const auto& entry : fs::directory_iterator(fs::path(env) / "lib", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("python3.", 0) != 0) continue;
    const int minor = std::atoi(name.c_str() + 8);
    found.emplace_back(minor, (entry.path() / "site-packages/nvidia/cudnn/lib" / kName).string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& f : found) out.push_back(f.second);
}

}  // namespace

std::vector<std::string> cudnn_library_candidates(const std::function<const char*(const char*)>& getenv) {
  auto env = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v ? v : "";
  };
  if (std::string explicit_path = env("TESSERA_CUDNN_LIBRARY"); !explicit_path.empty()) return {explicit_path};
  std::vector<std::string> out{kName};
  if (std::string cuda_home = env("CUDA_HOME"); !cuda_home.empty() && cuda_home != "/usr/local/cuda")
    add_toolkit(out, cuda_home);
  add_toolkit(out, "/usr/local/cuda");
  if (std::string venv = env("VIRTUAL_ENV"); !venv.empty() && venv != "/opt/torch/.venv") add_wheels(out, venv);
  add_wheels(out, "/opt/torch/.venv");
  return out;
}

const std::vector<std::string>& cudnn_required_symbols() {
  static const std::vector<std::string> names{
      "cudnnGetVersion",          "cudnnGetErrorString",           "cudnnGetLastErrorString",
      "cudnnCreate",              "cudnnDestroy",                  "cudnnSetStream",
      "cudnnBackendCreateDescriptor", "cudnnBackendDestroyDescriptor", "cudnnBackendSetAttribute",
      "cudnnBackendGetAttribute", "cudnnBackendFinalize",          "cudnnBackendExecute"};
  return names;
}

void* CudnnLibrary::symbol(const char* name) const {
  void* p = handle ? dlsym(handle, name) : nullptr;
  TESSERA_CHECK(p != nullptr, "cuDNN: ", path.empty() ? "no library loaded" : path, " has no symbol ", name);
  return p;
}

CudnnLibrary load_cudnn_library(const std::vector<std::string>& candidates) {
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
    for (const std::string& name : cudnn_required_symbols())
      if (!dlsym(handle, name.c_str())) missing += (missing.empty() ? "" : ", ") + name;
    if (!missing.empty()) {
      tried += str_cat("\n  ", candidate, ": loaded, but lacks ", missing, " (not cuDNN 9?)");
      dlclose(handle);
      continue;
    }
    CudnnLibrary lib{handle, candidate, 0};
    using GetVersion = size_t (*)();  // size_t cudnnGetVersion(void)
    lib.version = reinterpret_cast<GetVersion>(lib.symbol("cudnnGetVersion"))();
    if (lib.version < kMinimumVersion) {
      tried += str_cat("\n  ", candidate, ": cuDNN ", cudnn_version_string(lib.version), ", older than 9.0");
      dlclose(handle);
      continue;
    }
    return lib;
  }
  throw Error(str_cat("cuDNN (libcudnn.so.9) could not be loaded; searched, in order:", tried,
                      "\nset TESSERA_CUDNN_LIBRARY to its path, add its folder to LD_LIBRARY_PATH, or leave "
                      "TESSERA_CUDA_ATTENTION unset (or tiled) to run attention without cuDNN"));
}

const CudnnLibrary& cudnn_library() {
  static std::mutex mutex;
  static CudnnLibrary* loaded = nullptr;  // kept for the life of the process, as the library is
  std::lock_guard<std::mutex> lock(mutex);
  if (loaded == nullptr) loaded = new CudnnLibrary(load_cudnn_library());
  return *loaded;
}

std::string cudnn_version_string(size_t version) {
  return str_cat(version / 10000, ".", version % 10000 / 100, ".", version % 100);
}

}  // namespace tessera::kernels
