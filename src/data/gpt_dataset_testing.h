// Test helpers for the dataset tests: a scratch directory, and the Python reference
// (testdata/megatron_reference.py run by Debian's /usr/bin/python3 with python3-numpy), whose
// outputs are little-endian int64 arrays.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/check.h"

namespace tessera::data::testing {

namespace fs = std::filesystem;

// A fresh directory (several per test may coexist), removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    static int counter = 0;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name =
        str_cat("tessera_data_", ::getpid(), "_", info->test_suite_name(), "_", info->name(), "_", counter++);
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    path_ = fs::temp_directory_path() / name;
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

inline std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<int64_t> read_i64(const std::string& path) {
  const std::string bytes = read_file_bytes(path);
  EXPECT_EQ(bytes.size() % 8, 0u) << path;
  std::vector<int64_t> v(bytes.size() / 8);
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * 8);
  return v;
}

// Runs `megatron_reference.py <args>` with --out `out_dir`; returns "" on success, else the
// command and its stderr. Fails when python3-numpy is missing (scripts/setup.sh installs it).
inline std::string run_reference(const std::string& args, const std::string& out_dir) {
  static const bool has_numpy = std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  if (!has_numpy) return "these tests need /usr/bin/python3 with NumPy (Debian's python3-numpy)";
  const fs::path script = fs::path(__FILE__).parent_path() / "testdata" / "megatron_reference.py";
  const std::string log = (fs::path(out_dir) / "reference.log").string();
  const std::string cmd =
      str_cat("/usr/bin/python3 ", shell_quote(script.string()), " ", args, " --out ", shell_quote(out_dir), " >",
              shell_quote(log), " 2>&1");
  if (std::system(cmd.c_str()) != 0) return str_cat("failed: ", cmd, "\n", read_file_bytes(log));
  return "";
}

}  // namespace tessera::data::testing
