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
  using GetVersion = size_t (*)();  // size_t cudnnGetVersion(void)
  const auto too_old = [](void* handle) -> std::string {
    const size_t version = reinterpret_cast<GetVersion>(dlsym(handle, "cudnnGetVersion"))();
    return version < kMinimumVersion ? str_cat("cuDNN ", cudnn_version_string(version), ", older than 9.0") : "";
  };
  std::string tried;
  CudnnLibrary lib;
  lib.handle = open_nvidia_library(candidates, cudnn_required_symbols(), "(not cuDNN 9?)", too_old, &lib.path, &tried);
  if (lib.handle) {
    lib.version = reinterpret_cast<GetVersion>(lib.symbol("cudnnGetVersion"))();
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
