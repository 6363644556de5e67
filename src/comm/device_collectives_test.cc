// --device-collectives and the choice of a group's path (NCCL, staged over MPI, plain MPI), and where
// NCCL is looked for and how its absence reads: all of it without a GPU.
#include "comm/device_collectives.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "comm/nccl_library.h"
#include "core/testing.h"

namespace tessera::comm {
namespace {

using ::tessera::testing::error_of;

TEST(DeviceCollectives, FlagValues) {
  EXPECT_EQ(parse_device_collectives("auto"), DeviceCollectives::Auto);
  EXPECT_EQ(parse_device_collectives("staged"), DeviceCollectives::Staged);
  EXPECT_EQ(parse_device_collectives("nccl"), DeviceCollectives::Nccl);
  for (DeviceCollectives s : {DeviceCollectives::Auto, DeviceCollectives::Staged, DeviceCollectives::Nccl})
    EXPECT_EQ(parse_device_collectives(device_collectives_name(s)), s);
  EXPECT_EQ(error_of([] { parse_device_collectives("mpi"); }), "--device-collectives=mpi: must be auto, staged or nccl");
  EXPECT_EQ(error_of([] { parse_device_collectives(""); }), "--device-collectives=: must be auto, staged or nccl");
}

CollectivesFacts facts(bool device, bool nccl, std::optional<std::pair<int, int>> shared = std::nullopt) {
  CollectivesFacts f;
  f.device_tensors = device;
  f.nccl_loaded = nccl;
  f.nccl_why = nccl ? "" : "libnccl.so.2 not found";
  f.shared_device = shared;
  return f;
}

TEST(DeviceCollectives, HostTensorsAlwaysGoOverMpi) {
  for (DeviceCollectives s : {DeviceCollectives::Auto, DeviceCollectives::Staged, DeviceCollectives::Nccl}) {
    CollectivesChoice c = choose_collectives(s, facts(false, true), "data");
    EXPECT_EQ(c.path, CollectivesPath::Mpi);
    EXPECT_EQ(c.reason, "group data: mpi (host tensors)");
  }
}

TEST(DeviceCollectives, AutoPicksNcclOnlyWhereEveryRankHasItsOwnGpu) {
  CollectivesChoice own = choose_collectives(DeviceCollectives::Auto, facts(true, true), "tensor");
  EXPECT_EQ(own.path, CollectivesPath::Nccl);
  EXPECT_EQ(own.reason, "group tensor: nccl (each rank has its own GPU)");

  CollectivesChoice shared = choose_collectives(DeviceCollectives::Auto, facts(true, true, {{0, 1}}), "tensor");
  EXPECT_EQ(shared.path, CollectivesPath::Staged);
  EXPECT_EQ(shared.reason, "group tensor: staged (ranks 0 and 1 of the group share a GPU, which NCCL refuses)");

  CollectivesChoice none = choose_collectives(DeviceCollectives::Auto, facts(true, false), "pipeline");
  EXPECT_EQ(none.path, CollectivesPath::Staged);
  EXPECT_EQ(none.reason, "group pipeline: staged (no NCCL: libnccl.so.2 not found)");
}

TEST(DeviceCollectives, FlagForcesAPathOrSaysWhyNot) {
  EXPECT_EQ(choose_collectives(DeviceCollectives::Staged, facts(true, true), "data").path, CollectivesPath::Staged);
  EXPECT_EQ(choose_collectives(DeviceCollectives::Staged, facts(true, true), "data").reason,
            "group data: staged (--device-collectives staged)");
  EXPECT_EQ(choose_collectives(DeviceCollectives::Nccl, facts(true, true), "data").path, CollectivesPath::Nccl);
  EXPECT_EQ(error_of([] { choose_collectives(DeviceCollectives::Nccl, facts(true, false), "data"); }),
            "--device-collectives=nccl: group data cannot use NCCL: libnccl.so.2 not found; use --device-collectives "
            "staged or auto");
  EXPECT_EQ(error_of([] { choose_collectives(DeviceCollectives::Nccl, facts(true, true, {{1, 3}}), "expert"); }),
            "--device-collectives=nccl: group expert: ranks 1 and 3 of the group share a GPU, which NCCL refuses; "
            "give each rank its own GPU, or use --device-collectives staged or auto");
}

// An environment of our own, so that the machine's does not matter.
std::function<const char*(const char*)> env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(NcclLibrary, SearchOrder) {
  namespace fs = std::filesystem;
  const fs::path venv = fs::temp_directory_path() / str_cat("tessera_nccl_venv_", ::getpid());
  fs::remove_all(venv);
  for (const char* python : {"python3.9", "python3.12", "perl5"}) fs::create_directories(venv / "lib" / python);
  std::vector<std::string> c = nccl_library_candidates(env_of({{"CUDA_HOME", "/opt/cuda"}, {"VIRTUAL_ENV", venv.string()}}));
  const std::string wheel = "/site-packages/nvidia/nccl/lib/libnccl.so.2";
  std::vector<std::string> expected{"libnccl.so.2",
                                    "/opt/cuda/lib64/libnccl.so.2",
                                    "/opt/cuda/targets/x86_64-linux/lib/libnccl.so.2",
                                    "/usr/local/cuda/lib64/libnccl.so.2",
                                    "/usr/local/cuda/targets/x86_64-linux/lib/libnccl.so.2",
                                    (venv / "lib/python3.12").string() + wheel,
                                    (venv / "lib/python3.9").string() + wheel};
  // The device's PyTorch environment comes last, where this machine has one.
  ASSERT_GE(c.size(), expected.size());
  c.resize(expected.size());
  EXPECT_EQ(c, expected);
  fs::remove_all(venv);

  EXPECT_EQ(nccl_library_candidates(env_of({{"TESSERA_NCCL_LIBRARY", "/x/libnccl.so.2"}, {"CUDA_HOME", "/opt/cuda"}})),
            std::vector<std::string>{"/x/libnccl.so.2"});
}

TEST(NcclLibrary, MissingLibraryIsRefusedNamingWhatWasSearched) {
  const std::string e = error_of([] { load_nccl_library({"/nonexistent/libnccl.so.2", "libnccl-none.so.2"}); });
  EXPECT_NE(e.find("NCCL (libnccl.so.2) could not be loaded; searched, in order:\n  /nonexistent/libnccl.so.2: "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("\n  libnccl-none.so.2: "), std::string::npos) << e;
  EXPECT_NE(e.find("set TESSERA_NCCL_LIBRARY to its path, or add its folder to LD_LIBRARY_PATH"), std::string::npos) << e;
  // A library that loads but is not NCCL.
  const std::string not_nccl = error_of([] { load_nccl_library({"libm.so.6"}); });
  EXPECT_NE(not_nccl.find("libm.so.6: loaded, but lacks ncclGetVersion, "), std::string::npos) << not_nccl;
}

TEST(NcclLibrary, LoadsTheToolkitsNcclWhereThereIsOne) {
  // NCCL loads and reports its version without a GPU.
  NcclLibrary lib;
  try {
    lib = load_nccl_library();
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  EXPECT_GE(lib.version, 21300) << lib.path;  // ncclGetLastError came in 2.13
  EXPECT_NE(lib.symbol("ncclAllReduce"), nullptr);
  EXPECT_EQ(error_of([&] { lib.symbol("ncclNoSuchThing"); }), str_cat("NCCL: ", lib.path, " has no symbol ncclNoSuchThing"));
  EXPECT_EQ(nccl_version_string(22809), "2.28.9");
  EXPECT_EQ(nccl_version_string(2708), "2.7.8");
}

}  // namespace
}  // namespace tessera::comm
