#include "comm/nccl_library.h"

#include <dlfcn.h>

#include "core/check.h"
#include "core/nvidia_library_search.h"

namespace tessera::comm {

std::vector<std::string> nccl_library_candidates(const std::function<const char*(const char*)>& getenv) {
  return nvidia_library_candidates(
      {"libnccl.so.2", "TESSERA_NCCL_LIBRARY", {"lib64", "targets/x86_64-linux/lib"}, "nccl"}, getenv);
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
  NcclLibrary lib;
  lib.handle = open_nvidia_library(candidates, nccl_required_symbols(), "(an NCCL older than 2.13?)", nullptr,
                                   &lib.path, &tried);
  if (lib.handle) {
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
