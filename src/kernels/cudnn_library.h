// cuDNN 9, loaded at run time (dlopen) rather than linked: a binary built here runs where cuDNN is absent
// (CPU machines, GPU machines without it), and on a GPU machine uses the cuDNN it finds there, the CUDA
// toolkit's or the one PyTorch's wheels bring. Plain C++ (no cuDNN or CUDA header), so where it looks and
// how it refuses are tested in every build; kernels/cuda/cudnn_backend.h casts the symbols to cuDNN's
// types. The same search as comm/nccl_library.h's for NCCL.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace tessera::kernels {

// Where libcudnn.so.9 is looked for, in this order (those that do not exist are kept: the refusal lists
// them all):
//   1. TESSERA_CUDNN_LIBRARY, a path: the only candidate when set;
//   2. "libcudnn.so.9" by name: the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache);
//   3. the CUDA toolkit: $CUDA_HOME/lib64, $CUDA_HOME/lib, $CUDA_HOME/targets/x86_64-linux/lib, then
//      /usr/local/cuda's (the toolkit's tarball puts cuDNN in lib/, the Debian packages in lib64/);
//   4. NVIDIA's cuDNN wheel in Python environments ($VIRTUAL_ENV, then /opt/torch/.venv):
//      lib/python3.*/site-packages/nvidia/cudnn/lib/libcudnn.so.9 (newest Python first).
// `getenv` reads the environment (std::getenv by default; tests pass their own).
std::vector<std::string> cudnn_library_candidates(
    const std::function<const char*(const char*)>& getenv = [](const char* name) { return std::getenv(name); });

// The symbols the fused attention calls (the handle, the backend descriptor API, the error strings);
// load_cudnn_library refuses a library that lacks one.
const std::vector<std::string>& cudnn_required_symbols();

struct CudnnLibrary {
  void* handle = nullptr;  // from dlopen; kept open for the life of the process
  std::string path;        // the candidate that loaded
  size_t version = 0;      // cudnnGetVersion: 91900 for 9.19.0
  // The address of `name` (an Error naming it and the library when absent).
  void* symbol(const char* name) const;
};

// The first candidate that loads, has every required symbol and is cuDNN 9 or later. Otherwise an Error
// that names each candidate tried and why it failed (dlopen's message, the missing symbol or the old
// version), and how to point at one.
CudnnLibrary load_cudnn_library(const std::vector<std::string>& candidates = cudnn_library_candidates());

// The process's cuDNN, loaded on first use from the default candidates (the Error above if none loads;
// asked again after a failure, so a test may set TESSERA_CUDNN_LIBRARY first).
const CudnnLibrary& cudnn_library();

// "9.19.0" from 91900 (cuDNN 9's numbering: major * 10000 + minor * 100 + patch).
std::string cudnn_version_string(size_t version);

}  // namespace tessera::kernels
