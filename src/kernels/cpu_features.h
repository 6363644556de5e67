// What this x86-64 CPU can do for 16-bit matrix products, from CPUID and XGETBV.
//
// Why not ask oneDNN: on an AVX-512 CPU without AVX512-BF16, oneDNN still builds a non-reference bf16
// matmul (it emulates the bf16 dot product with AVX-512 integer instructions), about 3x slower than its
// fp32 kernel. Whether 16-bit GEMMs are worth running as 16-bit is a property of the CPU, so it is read
// from the CPU: an instruction set counts only if CPUID reports it and the operating system has enabled
// its register state (XCR0: the AVX-512 opmask and ZMM state, the AMX tile state).
#pragma once

#include <string>

#include "core/dtype.h"

namespace tessera::kernels {

struct CpuFeatures {
  bool avx2 = false;
  bool avx512f = false, avx512bw = false;
  bool avx512_bf16 = false;  // VDPBF16PS: bf16 dot products into fp32
  bool avx512_fp16 = false;  // fp16 arithmetic on ZMM registers
  bool amx_tile = false, amx_bf16 = false, amx_fp16 = false;
  bool os_avx512 = false;    // XCR0 has the opmask, ZMM_Hi256 and Hi16_ZMM state
  bool os_amx = false;       // XCR0 has the XTILECFG and XTILEDATA state

  // Whether type t (BF16 or F16) has a native matrix-product instruction here: bf16 with AVX512-BF16
  // or AMX-BF16, fp16 with AVX512-FP16 or AMX-FP16.
  bool native_16bit(DType t) const;
  // The detected features that matter for GEMMs, as /proc/cpuinfo names them: "avx2 avx512f ...",
  // or "none".
  std::string str() const;
};

// Read once, on first use.
const CpuFeatures& cpu_features();

}  // namespace tessera::kernels
