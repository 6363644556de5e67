// NCCL, loaded at run time (dlopen) rather than linked: a binary built here runs where NCCL is absent
// (CPU machines, or ranks that stage through the host), and on a GPU machine uses the NCCL it finds
// there, the CUDA toolkit's or the one PyTorch's wheels bring. Plain C++ (no NCCL or CUDA header), so
// that where it looks is tested in every build; the NCCL process group (comm/cuda/nccl_process_group.h)
// casts the symbols to NCCL's types.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace tessera::comm {

// Where libnccl.so.2 is looked for, in this order (those that do not exist are kept: the refusal lists
// them all):
//   1. TESSERA_NCCL_LIBRARY, a path: the only candidate when set;
//   2. "libnccl.so.2" by name: the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache);
//   3. the CUDA toolkit: $CUDA_HOME/lib64, $CUDA_HOME/targets/x86_64-linux/lib, then /usr/local/cuda's;
//   4. NVIDIA's NCCL wheel in Python environments ($VIRTUAL_ENV, then /opt/torch/.venv):
//      lib/python3.*/site-packages/nvidia/nccl/lib/libnccl.so.2 (newest Python first).
// `getenv` reads the environment (std::getenv by default; tests pass their own).
std::vector<std::string> nccl_library_candidates(
    const std::function<const char*(const char*)>& getenv = [](const char* name) { return std::getenv(name); });

// The symbols the process group uses; load_nccl_library refuses a library that lacks one.
const std::vector<std::string>& nccl_required_symbols();

struct NcclLibrary {
  void* handle = nullptr;  // from dlopen; kept open for the life of the process
  std::string path;        // the candidate that loaded
  int version = 0;         // ncclGetVersion: 22809 for 2.28.9
  // The address of `name` (an Error naming it and the library when absent).
  void* symbol(const char* name) const;
};

// The first candidate that loads and has every required symbol. Otherwise an Error that names each
// candidate tried and why it failed (dlopen's message or the missing symbol), and how to point at one.
NcclLibrary load_nccl_library(const std::vector<std::string>& candidates = nccl_library_candidates());

// "2.28.9" from 22809 (2.9+ numbering: major * 10000 + minor * 100 + patch).
std::string nccl_version_string(int version);

}  // namespace tessera::comm
