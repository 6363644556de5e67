// This process's resident memory as the kernel counts it, to check the allocator's own accounting
// (core/tensor's TensorMemory) against what the machine sees; and the machine's memory.
#pragma once

namespace tessera {

// Resident memory now (VmRSS) and at its peak (VmHWM), in bytes; 0 where /proc is missing.
double resident_bytes();
double peak_resident_bytes();

// The machine's physical memory in bytes (0 where unknown): a bound for sizes a user gives in bytes, so
// an impossible one is refused by flag rather than ending in std::bad_alloc.
double physical_memory_bytes();

}  // namespace tessera
