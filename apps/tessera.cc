// The `tessera` command: one binary, one subcommand per job (train today; preprocess, generate, serve,
// eval, convert and plan as they land).
#include <malloc.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "comm/mpi_process_group.h"
#include "core/check.h"
#include "train/arguments.h"
#include "train/trainer.h"

namespace {

constexpr const char* kUsage =
    "usage: tessera <command> [flags]\n"
    "\n"
    "commands:\n"
    "  train    train a GPT model (Megatron-LM flags; tessera train --help lists them)\n";

// Every rank parses and validates the same flags, so a bad flag fails identically everywhere: rank 0
// reports it and all ranks exit 1 without having communicated. A failure after that (one rank's
// checkpoint file, say) may leave other ranks inside a collective, so it aborts the whole job.
int run_train(const std::vector<std::string>& args) {
  tessera::comm::MpiRuntime mpi;
  std::unique_ptr<tessera::comm::ProcessGroup> world = tessera::comm::make_mpi_world_group();
  const bool reporter = world->rank() == 0;
  tessera::train::TrainArguments parsed;
  try {
    parsed = tessera::train::parse_train_arguments(args, world->size());
  } catch (const tessera::train::HelpRequested& help) {
    if (reporter) std::cout << help.text;
    return 0;
  } catch (const tessera::Error& e) {
    if (reporter) std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
  tessera::comm::set_collective_timeout(std::chrono::minutes(parsed.distributed_timeout_minutes));
  try {
    tessera::train::Trainer trainer(std::move(parsed), world.get());
    trainer.train();
  } catch (const std::exception& e) {
    if (world->size() == 1) throw;
    tessera::comm::abort_all(std::string("error: ") + e.what());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Activations are allocated and freed every micro-batch; keep freed blocks in the heap instead of
  // returning them to the OS, or every step pays for page faults on hundreds of MB.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);

  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 1 : 0;
  }
  std::string command = args[0];
  args.erase(args.begin());
  try {
    if (command == "train") return run_train(args);
    std::cerr << "tessera: unknown command '" << command << "'\n" << kUsage;
    return 2;
  } catch (const tessera::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
