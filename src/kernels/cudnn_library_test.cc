// Where cuDNN is looked for and how its absence reads (kernels/cudnn_library.h), all of it without a GPU:
// cuDNN loads and reports its version on a machine that has no driver.
#include "kernels/cudnn_library.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "core/testing.h"

namespace tessera::kernels {
namespace {

using ::tessera::testing::error_of;

// An environment of our own, so that the machine's does not matter.
std::function<const char*(const char*)> env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(CudnnLibrary, SearchOrder) {
  namespace fs = std::filesystem;
  const fs::path venv = fs::temp_directory_path() / str_cat("tessera_cudnn_venv_", ::getpid());
  fs::remove_all(venv);
  for (const char* python : {"python3.9", "python3.12", "perl5"}) fs::create_directories(venv / "lib" / python);
  std::vector<std::string> c =
      cudnn_library_candidates(env_of({{"CUDA_HOME", "/opt/cuda"}, {"VIRTUAL_ENV", venv.string()}}));
  const std::string wheel = "/site-packages/nvidia/cudnn/lib/libcudnn.so.9";
  std::vector<std::string> expected{"libcudnn.so.9",
                                    "/opt/cuda/lib64/libcudnn.so.9",
                                    "/opt/cuda/lib/libcudnn.so.9",
                                    "/opt/cuda/targets/x86_64-linux/lib/libcudnn.so.9",
                                    "/usr/local/cuda/lib64/libcudnn.so.9",
                                    "/usr/local/cuda/lib/libcudnn.so.9",
                                    "/usr/local/cuda/targets/x86_64-linux/lib/libcudnn.so.9",
                                    (venv / "lib/python3.12").string() + wheel,
                                    (venv / "lib/python3.9").string() + wheel};
  // The device's PyTorch environment comes last, where this machine has one.
  ASSERT_GE(c.size(), expected.size());
  c.resize(expected.size());
  EXPECT_EQ(c, expected);
  fs::remove_all(venv);

  // CUDA_HOME naming /usr/local/cuda is not searched twice.
  const std::vector<std::string> plain = cudnn_library_candidates(env_of({{"CUDA_HOME", "/usr/local/cuda"}}));
  EXPECT_EQ(std::count(plain.begin(), plain.end(), "/usr/local/cuda/lib/libcudnn.so.9"), 1);

  EXPECT_EQ(cudnn_library_candidates(env_of({{"TESSERA_CUDNN_LIBRARY", "/x/libcudnn.so.9"}, {"CUDA_HOME", "/opt/cuda"}})),
            std::vector<std::string>{"/x/libcudnn.so.9"});
}

TEST(CudnnLibrary, MissingLibraryIsRefusedNamingWhatWasSearched) {
  const std::string e = error_of([] { load_cudnn_library({"/nonexistent/libcudnn.so.9", "libcudnn-none.so.9"}); });
  EXPECT_NE(e.find("cuDNN (libcudnn.so.9) could not be loaded; searched, in order:\n  /nonexistent/libcudnn.so.9: "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("\n  libcudnn-none.so.9: "), std::string::npos) << e;
  EXPECT_NE(e.find("set TESSERA_CUDNN_LIBRARY to its path, add its folder to LD_LIBRARY_PATH, or leave "
                   "TESSERA_CUDA_ATTENTION unset"),
            std::string::npos)
      << e;
  // A library that loads but is not cuDNN.
  const std::string not_cudnn = error_of([] { load_cudnn_library({"libm.so.6"}); });
  EXPECT_NE(not_cudnn.find("libm.so.6: loaded, but lacks cudnnGetVersion, cudnnGetErrorString, "), std::string::npos)
      << not_cudnn;
}

TEST(CudnnLibrary, LoadsTheToolkitsCudnnWhereThereIsOne) {
  CudnnLibrary lib;
  try {
    lib = load_cudnn_library();
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  EXPECT_GE(lib.version, 90000u) << lib.path;
  EXPECT_NE(lib.symbol("cudnnBackendExecute"), nullptr);
  EXPECT_EQ(error_of([&] { lib.symbol("cudnnNoSuchThing"); }),
            str_cat("cuDNN: ", lib.path, " has no symbol cudnnNoSuchThing"));
  EXPECT_EQ(cudnn_version_string(91900), "9.19.0");
  EXPECT_EQ(cudnn_version_string(90102), "9.1.2");
}

}  // namespace
}  // namespace tessera::kernels
