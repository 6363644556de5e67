#include "apps/plan_calibrate.h"

#include <cstdio>
#include <memory>

#include "comm/mpi_process_group.h"
#include "core/check.h"
#include "core/file_io.h"
#include "plan/calibration.h"

namespace tessera::apps {

int run_calibration(const model::ModelConfig& c, const plan::Layout& l, const std::string& output) {
  comm::MpiRuntime mpi;
  std::unique_ptr<comm::ProcessGroup> world = comm::make_mpi_world_group();
  plan::DeviceSpec d = plan::calibrate_device(c, l, *world);
  if (world->rank() != 0) return 0;
  nlohmann::json j = {{"device", plan::to_json(d)},
                      {"num_devices", world->size()},
                      {"calibrated_for", plan::calibration_key(c, l, world->size())}};
  try {
    write_file_atomically(output, j.dump(2) + "\n");
  } catch (const Error& e) {
    throw Error(str_cat("--calibrate-output=", output, ": ", e.what()));
  }
  std::printf("calibrated %d rank(s) of %d threads each on %s, %s GEMM inputs, for the model's shapes at tp %d and "
              "micro-batch %lld:\n", world->size(), j["calibrated_for"]["threads_per_rank"].get<int>(),
              plan::cpu_model_name().c_str(), plan::to_string(l.precision).c_str(), l.tp,
              static_cast<long long>(l.micro_batch_size));
  for (const auto& r : d.gemm_rates)
    std::printf("  GEMM %lld x %lld x %lld (forward, input and weight gradients): %.1f GFLOP/s\n", r.m, r.n, r.k,
                r.flops_per_second / 1e9);
  std::printf("  attention (flash, forward + backward): %.1f GFLOP/s\n", d.attention_flops_per_second / 1e9);
  std::printf("  memory bandwidth (triad): %.1f GB/s\n", d.memory_bandwidth / 1e9);
  if (world->size() > 1)
    std::printf("  MPI all-reduce over %d ranks: bus bandwidth %.2f GB/s, latency %.1f us per step\n", world->size(),
                d.intra_node_bandwidth / 1e9, d.intra_node_latency * 1e6);
  std::printf("  memory held before the model: %.0f MiB\nwrote %s (use it with tessera plan --cluster %s)\n",
              d.reserved_bytes / (1 << 20), output.c_str(), output.c_str());
  return 0;
}

}  // namespace tessera::apps
