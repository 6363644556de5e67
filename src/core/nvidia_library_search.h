// Where a run-time-loaded NVIDIA library (NCCL: comm/nccl_library.h; cuDNN: kernels/cudnn_library.h) is
// looked for, in order: the path in its variable (then the only candidate), its file name by the dynamic
// loader's search (LD_LIBRARY_PATH), the CUDA toolkit ($CUDA_HOME, then /usr/local/cuda) in the given
// folders, then NVIDIA's wheel of a Python environment ($VIRTUAL_ENV, then /opt/torch/.venv, the GPU
// machine's PyTorch: lib/python3.*/site-packages/nvidia/<wheel>/lib/, newest Python first).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tessera {

struct NvidiaLibrarySearch {
  const char* file;                            // libnccl.so.2
  const char* variable;                        // TESSERA_NCCL_LIBRARY
  std::vector<const char*> toolkit_folders;    // lib64, targets/x86_64-linux/lib
  const char* wheel;                           // nccl (site-packages/nvidia/nccl/lib)
};

// The candidates in order; getenv is injected so tests can set the variables.
std::vector<std::string> nvidia_library_candidates(const NvidiaLibrarySearch& search,
                                                   const std::function<const char*(const char*)>& getenv);

// dlopens the candidates in order and returns the first that has every symbol and that `reject` (where
// given) finds no fault with, with its path; null where none does. Each candidate passed over adds a line
// to *tried: dlopen's reason, "loaded, but lacks <symbols> <lacks_hint>", or reject's message.
void* open_nvidia_library(const std::vector<std::string>& candidates, const std::vector<std::string>& symbols,
                          const std::string& lacks_hint, const std::function<std::string(void* handle)>& reject,
                          std::string* path, std::string* tried);

}  // namespace tessera
