// `tessera train`: every rank of the job (or the one process) runs this.
#include <chrono>
#include <iostream>
#include <memory>

#include "apps/commands.h"
#include "comm/mpi_process_group.h"
#include "core/check.h"
#include "train/arguments.h"
#include "train/trainer.h"

namespace tessera::apps {

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
    train::Trainer trainer(std::move(parsed), world.get());
    trainer.train();
  } catch (const std::exception& e) {
    if (world->size() == 1) throw;
    comm::abort_all(std::string("error: ") + e.what());
  }
  return 0;
}


}  // namespace tessera::apps
