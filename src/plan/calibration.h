// `tessera plan --calibrate`: measure the machine at hand so that its plans are predictions about it.
// Every rank of the job measures at once (as every rank computes at once in training): the GEMM rates
// of the model's own shapes for the layout (forward, input-gradient and weight-gradient products through
// kernels::gemm), the flash-attention rate, the streaming memory bandwidth, the MPI all-reduce's
// bandwidth and latency over the world group, and the memory a process holds before any model (the
// "reserved" bytes). The result is a device entry for --cluster files.
#pragma once

#include "comm/process_group.h"
#include "model/config.h"
#include "plan/cluster.h"
#include "plan/layout.h"

namespace tessera::plan {

// seconds_per_measurement bounds the time spent on each number (repetitions stop after it).
DeviceSpec calibrate_device(const model::GptConfig& c, const Layout& l, comm::ProcessGroup& world,
                            double seconds_per_measurement = 0.3);

// The GEMM shapes (m, n, k) of one layer and the output layer for a layout: what calibrate_device measures
// and what the time model looks up.
struct GemmShape {
  long long m, n, k;
};
std::vector<GemmShape> model_gemm_shapes(const model::GptConfig& c, const Layout& l);

// Resident memory of this process now (VmRSS) and at its peak (VmHWM), in bytes; 0 where /proc is missing.
double resident_bytes();
double peak_resident_bytes();

}  // namespace tessera::plan
