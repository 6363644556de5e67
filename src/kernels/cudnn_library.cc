#include "kernels/cudnn_library.h"

#include <dlfcn.h>

#include <mutex>

#include "core/check.h"
#include "core/nvidia_library_search.h"

namespace tessera::kernels {

namespace {

constexpr size_t kMinimumVersion = 90000;  // the backend API's SDPA graphs as built here: cuDNN 9

}  // namespace

std::vector<std::string> cudnn_library_candidates(const std::function<const char*(const char*)>& getenv) {
  return nvidia_library_candidates(
      {"libcudnn.so.9", "TESSERA_CUDNN_LIBRARY", {"lib64", "lib", "targets/x86_64-linux/lib"}, "cudnn"}, getenv);
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
