#include "kernels/cpu_features.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace tessera::kernels {
namespace {

// The "flags" line of the first processor in /proc/cpuinfo (empty where there is none). Linux lists
// an instruction set only when the CPU reports it and the kernel has enabled its register state, which
// is the rule cpu_features() applies.
std::set<std::string> proc_cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::set<std::string> flags;
      for (std::string w; words >> w;) flags.insert(w);
      return flags;
    }
  return {};
}

TEST(CpuFeatures, AgreeWithProcCpuinfo) {
  const std::set<std::string> flags = proc_cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo (not Linux on x86-64)";
  const CpuFeatures& f = cpu_features();
  std::printf("detected: %s\n", f.str().c_str());
  auto has = [&](const char* name) { return flags.count(name) > 0; };
  EXPECT_EQ(f.avx2, has("avx2"));
  EXPECT_EQ(f.avx512f, has("avx512f"));
  EXPECT_EQ(f.avx512bw, has("avx512bw"));
  EXPECT_EQ(f.avx512_bf16, has("avx512_bf16"));
  EXPECT_EQ(f.avx512_fp16, has("avx512_fp16"));
  EXPECT_EQ(f.amx_tile, has("amx_tile"));
  EXPECT_EQ(f.amx_bf16, has("amx_bf16"));
  // Kernels before 6.4 do not know amx_fp16; where the kernel names it, the CPU must have it.
  if (has("amx_fp16")) {
    EXPECT_TRUE(f.amx_fp16);
  }
  // Every feature detected is named in str(), and only those.
  EXPECT_EQ(f.str().find("avx512_bf16") != std::string::npos, f.avx512_bf16);
  EXPECT_EQ(f.str() == "none", !f.avx2 && !f.avx512f && !f.amx_tile);
}

// Only a 16-bit dot-product instruction counts: plain AVX-512 (where oneDNN emulates bf16) does not.
TEST(CpuFeatures, NativeSixteenBitNeedsADotProductInstruction) {
  CpuFeatures f;
  f.avx2 = f.avx512f = f.avx512bw = f.os_avx512 = true;
  EXPECT_FALSE(f.native_16bit(DType::BF16));
  EXPECT_FALSE(f.native_16bit(DType::F16));
  EXPECT_EQ(f.str(), "avx2 avx512f avx512bw");
  CpuFeatures bf16 = f;
  bf16.avx512_bf16 = true;
  EXPECT_TRUE(bf16.native_16bit(DType::BF16));
  EXPECT_FALSE(bf16.native_16bit(DType::F16));
  CpuFeatures fp16 = f;
  fp16.avx512_fp16 = true;
  EXPECT_FALSE(fp16.native_16bit(DType::BF16));
  EXPECT_TRUE(fp16.native_16bit(DType::F16));
  CpuFeatures amx = f;
  amx.amx_bf16 = amx.amx_fp16 = true;  // no tile state: no AMX
  EXPECT_FALSE(amx.native_16bit(DType::BF16));
  amx.amx_tile = true;
  EXPECT_TRUE(amx.native_16bit(DType::BF16));
  EXPECT_TRUE(amx.native_16bit(DType::F16));
  EXPECT_FALSE(amx.native_16bit(DType::F32));
  EXPECT_EQ(CpuFeatures().str(), "none");
}

}  // namespace
}  // namespace tessera::kernels
