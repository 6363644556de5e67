// `tessera plan --calibrate`: measure the machine at hand so that its plans are predictions about it.
// Every rank of the job measures at once (as every rank computes at once in training): the GEMM rates
// of the model's own shapes for the layout (forward, input-gradient and weight-gradient products through
// kernels::gemm), each also on 8, 32 and 128 rows (a token slice's GEMMs), the flash-attention rate, the
// streaming memory bandwidth, a small kernel's call (the floor every kernel pays), the MPI all-reduce's
// bandwidth and latency over the world group, and the memory a process holds before any model (the
// "reserved" bytes). The result is a device entry for --cluster files.
#pragma once

#include "comm/process_group.h"
#include "model/config.h"
#include "plan/cluster.h"
#include "plan/layout.h"

namespace tessera::plan {

// What a calibration measured, as a flat JSON object: the model's hyper-parameters that fix the GEMM and
// attention shapes, the tensor-parallel size and micro-batch, the precision of the GEMM inputs, and the
// machine (CPU model, threads per rank, ranks). `tessera plan --calibrate` writes it beside the device
// entry ("calibrated_for"); `tessera train` uses the rates only for a run with the same key.
nlohmann::json calibration_key(const model::ModelConfig& c, const Layout& l, int ranks);
// Where a file's key `have` differs from a run's `want`, one "field: X (calibrated) vs Y (this run)" each;
// empty when they agree.
std::vector<std::string> calibration_mismatches(const nlohmann::json& have, const nlohmann::json& want);
// The CPU's model name (/proc/cpuinfo), or "unknown cpu".
std::string cpu_model_name();

// seconds_per_measurement bounds the time spent on each number (repetitions stop after it).
DeviceSpec calibrate_device(const model::ModelConfig& c, const Layout& l, comm::ProcessGroup& world,
                            double seconds_per_measurement = 0.3);

// The GEMM shapes (m, n, k) of one layer and the output layer for a layout: what calibrate_device measures
// and what the time model looks up.
struct GemmShape {
  long long m, n, k;
};
std::vector<GemmShape> model_gemm_shapes(const model::ModelConfig& c, const Layout& l);

}  // namespace tessera::plan
