// This process's resident memory as the kernel counts it, to check the allocator's own accounting
// (core/tensor's TensorMemory) against what the machine sees.
#pragma once

namespace tessera {

// Resident memory now (VmRSS) and at its peak (VmHWM), in bytes; 0 where /proc is missing.
double resident_bytes();
double peak_resident_bytes();

}  // namespace tessera
