// `tessera train`: every rank of the job (or the one process) runs this.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>

#include "apps/commands.h"
#include "comm/mpi_process_group.h"
#include "core/check.h"
#include "plan/calibration.h"
#include "plan/planner.h"
#include "train/arguments.h"
#include "train/trainer.h"

namespace tessera::apps {

namespace {

// The planner's prediction for this run, printed beside the first log line's measurement. The cluster
// is ./tessera_cluster.json when `tessera plan --calibrate` wrote one here, else the built-in cpu guess.
// A plan that cannot be made is reported, never fatal to the training run.
std::string plan_note(const train::TrainArguments& a, double measured_ms) try {
  const char* calibrated = "tessera_cluster.json";
  const bool have_file = std::filesystem::exists(calibrated);
  plan::ClusterSpec cluster = have_file ? plan::read_cluster_file(calibrated) : plan::ClusterSpec{plan::find_device("cpu"), 1};
  cluster.num_devices = static_cast<int>(a.world_size);
  plan::Layout l;
  l.tp = static_cast<int>(a.tensor_model_parallel_size);
  l.pp = static_cast<int>(a.pipeline_model_parallel_size);
  l.dp = static_cast<int>(a.data_parallel_size());
  l.sequence_parallel = a.sequence_parallel;
  l.micro_batch_size = a.micro_batch_size;
  l.global_batch_size = a.global_batch_size;
  l.overlap_grad_reduce = a.overlap_grad_reduce;
  l.ddp_bucket_size = a.ddp_bucket_size;
  l.virtual_stages = static_cast<int>(a.virtual_pipeline_size);
  if (a.recompute_granularity == "full") l.recompute = plan::Recompute::Full;
  if (a.recompute_granularity == "selective" || a.recompute_activations) l.recompute = plan::Recompute::Selective;
  l.recompute_num_layers = static_cast<int>(std::max<int64_t>(1, a.recompute_num_layers));
  l.precision = plan::Precision::Fp32;
  l.flash_attention = true;
  const plan::Plan p = plan::make_plan(a.model, l, cluster, {});
  auto one_decimal = [](double x) { return std::round(x * 10) / 10; };
  return str_cat(" plan (", have_file ? calibrated : "uncalibrated cpu; run tessera plan --calibrate here",
                 "): elapsed time per iteration (ms): predicted ", one_decimal(p.time.total() * 1e3), ", measured ",
                 one_decimal(measured_ms), " | peak memory per rank (MiB): predicted ",
                 one_decimal(p.peak_memory() / (1 << 20)), ", measured (peak RSS) ",
                 one_decimal(plan::peak_resident_bytes() / (1 << 20)));
} catch (const std::exception& e) {
  return str_cat(" plan: no prediction (", e.what(), ")");
}

}  // namespace

// Every rank parses and validates the same flags, so a bad flag fails identically everywhere: rank 0
// reports it and all ranks exit 1 without having communicated. A failure after that (one rank's
// checkpoint file, say) may leave other ranks inside a collective, so it aborts the whole job.
int train_command(const std::vector<std::string>& args) {
  comm::MpiRuntime mpi;
  std::unique_ptr<comm::ProcessGroup> world = comm::make_mpi_world_group();
  const bool reporter = world->rank() == 0;
  train::TrainArguments parsed;
  try {
    parsed = train::parse_train_arguments(args, world->size());
  } catch (const train::HelpRequested& help) {
    if (reporter) std::cout << help.text;
    return 0;
  } catch (const Error& e) {
    if (reporter) std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
  comm::set_collective_timeout(std::chrono::minutes(parsed.distributed_timeout_minutes));
  try {
    const train::TrainArguments planned = parsed;
    train::Trainer trainer(std::move(parsed), world.get());
    trainer.first_interval_note = [&planned](double measured_ms) { return plan_note(planned, measured_ms); };
    trainer.train();
  } catch (const std::exception& e) {
    if (world->size() == 1) throw;
    comm::abort_all(std::string("error: ") + e.what());
  }
  return 0;
}


}  // namespace tessera::apps
