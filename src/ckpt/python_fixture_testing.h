// Test helpers only: fixtures made by the real producer (Python's pickle and zipfile, PyTorch's
// torch.save and DCP writer) in a temporary directory, so the readers are checked against the files
// users have rather than against this project's idea of them.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/check.h"

namespace tessera::ckpt::testing {

// A python3 that imports `module` ("torch", or "" for any python3): Debian's /usr/bin/python3 first,
// as a pyenv python on PATH may lack the Debian packages. Empty if there is none.
inline std::string find_python(const std::string& module) {
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    const std::string cmd =
        str_cat(py, " -c 'import sys", module.empty() ? "" : ", " + module, "' >/dev/null 2>&1");
    if (std::system(cmd.c_str()) == 0) return py;
  }
  return "";
}

inline std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh directory per test, removed afterwards.
class FixtureDir {
 public:
  FixtureDir() {
    dir_ = std::filesystem::temp_directory_path() /
           str_cat("tessera_", ::getpid(), "_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~FixtureDir() { std::filesystem::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  // Runs `script` with `python`, the directory as its argv[1]; false (and the output in the test's
  // log) when it fails.
  bool run_python(const std::string& python, const std::string& script) const {
    write_file_bytes(file("fixture.py"), script);
    const std::string cmd = str_cat(python, " ", file("fixture.py"), " ", dir_.string(), " > ", file("fixture.log"), " 2>&1");
    const bool ok = std::system(cmd.c_str()) == 0;
    if (!ok) ADD_FAILURE() << "fixture script failed:\n" << read_file_bytes(file("fixture.log"));
    return ok;
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace tessera::ckpt::testing
