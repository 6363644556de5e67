#include "kernels/cpu_features.h"

#include <cpuid.h>

#include <cstdint>

namespace tessera::kernels {
namespace {

bool bit(uint32_t reg, int b) { return (reg >> b) & 1u; }

// XCR0, the register state the OS saves and restores (valid only when CPUID.1:ECX.OSXSAVE is set).
uint64_t xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !bit(c, 27)) return f;  // no OSXSAVE: no AVX state at all
  const uint64_t x = xcr0();
  const bool os_avx = (x & 0x6) == 0x6;  // SSE and AVX (YMM) state
  f.os_avx512 = os_avx && (x & 0xe0) == 0xe0;
  f.os_amx = (x & 0x60000) == 0x60000;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned max_subleaf = a;
  f.avx2 = os_avx && bit(b, 5);
  f.avx512f = f.os_avx512 && bit(b, 16);
  f.avx512bw = f.os_avx512 && bit(b, 30);
  f.avx512_fp16 = f.os_avx512 && bit(d, 23);
  f.amx_bf16 = f.os_amx && bit(d, 22);
  f.amx_tile = f.os_amx && bit(d, 24);
  if (max_subleaf >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512_bf16 = f.os_avx512 && bit(a, 5);
    f.amx_fp16 = f.os_amx && bit(a, 21);
  }
  return f;
}

}  // namespace

bool CpuFeatures::native_16bit(DType t) const {
  if (t == DType::BF16) return avx512_bf16 || (amx_tile && amx_bf16);
  if (t == DType::F16) return avx512_fp16 || (amx_tile && amx_fp16);
  return false;
}

std::string CpuFeatures::str() const {
  std::string s;
  const std::pair<bool, const char*> names[] = {{avx2, "avx2"},           {avx512f, "avx512f"},
                                                {avx512bw, "avx512bw"},   {avx512_bf16, "avx512_bf16"},
                                                {avx512_fp16, "avx512_fp16"}, {amx_tile, "amx_tile"},
                                                {amx_bf16, "amx_bf16"},   {amx_fp16, "amx_fp16"}};
  for (const auto& [on, name] : names) {
    if (!on) continue;
    if (!s.empty()) s += ' ';
    s += name;
  }
  return s.empty() ? "none" : s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace tessera::kernels
