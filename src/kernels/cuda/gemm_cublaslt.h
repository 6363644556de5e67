// The CUDA devices' GemmBackend (kernels/gemm.h) on cuBLASLt: fp32 (as TF32 with GemmArgs::tf32), and
// bf16/fp16 either as 16-bit buffers or as GemmArgs::input_type over fp32 buffers (cuBLASLt's fast-16-bit compute types, fp32
// accumulation); bias, GELU (tanh) and bias+GELU epilogues; strided batches with a bias batch stride.
// The row-major contract maps to cuBLASLt's column-major through kernels/gemm_column_major.h. Each
// distinct shape's descriptors and the algorithm cuBLASLt's heuristic picks for it are made once and
// cached.
//
// libcublasLt is opened when the backend is registered (dlopen), not linked: a process that loads it
// at start pays about 0.8 s and 200 MB (measured here), which every CPU run and every test would pay.
#pragma once

namespace tessera::cuda {

// Loads libcublasLt (the system's search path, then $CUDA_HOME/lib64, then /usr/local/cuda/lib64) and
// registers the backend for CUDA devices; idempotent. Throws tessera::Error naming the library and the
// loader's message when it cannot be loaded.
void register_gemm_backend();

}  // namespace tessera::cuda
