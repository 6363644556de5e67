#include "core/nvidia_library_search.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/check.h"

namespace tessera {

namespace {

// lib/python3.*/site-packages/nvidia/<wheel>/lib/<file> under a Python environment, newest Python first
// (python3.12 before python3.9: compared by the minor number).
void add_wheels(std::vector<std::string>& out, const NvidiaLibrarySearch& search, const std::string& env) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::pair<int, std::string>> found;
  for (const auto& entry : fs::directory_iterator(fs::path(env) / "lib", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("python3.", 0) != 0) continue;
    const int minor = std::atoi(name.c_str() + 8);
    found.emplace_back(minor,
                       (entry.path() / "site-packages/nvidia" / search.wheel / "lib" / search.file).string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& f : found) out.push_back(f.second);
}

}  // namespace

std::vector<std::string> nvidia_library_candidates(const NvidiaLibrarySearch& search,
                                                   const std::function<const char*(const char*)>& getenv) {
  auto env = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v ? v : "";
  };
  if (std::string explicit_path = env(search.variable); !explicit_path.empty()) return {explicit_path};
  std::vector<std::string> out{search.file};
  auto add_toolkit = [&](const std::string& root) {
    for (const char* folder : search.toolkit_folders) out.push_back(root + "/" + folder + "/" + search.file);
  };
  if (std::string cuda_home = env("CUDA_HOME"); !cuda_home.empty() && cuda_home != "/usr/local/cuda")
    add_toolkit(cuda_home);
  add_toolkit("/usr/local/cuda");
  if (std::string venv = env("VIRTUAL_ENV"); !venv.empty() && venv != "/opt/torch/.venv")
    add_wheels(out, search, venv);
  add_wheels(out, search, "/opt/torch/.venv");
  return out;
}

void* open_nvidia_library(const std::vector<std::string>& candidates, const std::vector<std::string>& symbols,
                          const std::string& lacks_hint, const std::function<std::string(void* handle)>& reject,
                          std::string* path, std::string* tried) {
  for (const std::string& candidate : candidates) {
    dlerror();
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      *tried += str_cat("\n  ", candidate, ": ", why ? why : "dlopen failed");
      continue;
    }
    std::string fault;
    for (const std::string& name : symbols)
      if (!dlsym(handle, name.c_str())) fault += (fault.empty() ? "" : ", ") + name;
    if (!fault.empty()) fault = str_cat("loaded, but lacks ", fault, " ", lacks_hint);
    if (fault.empty() && reject) fault = reject(handle);
    if (!fault.empty()) {
      *tried += str_cat("\n  ", candidate, ": ", fault);
      dlclose(handle);
      continue;
    }
    *path = candidate;
    return handle;
  }
  return nullptr;
}

}  // namespace tessera
