// The `tessera` command: one binary, one subcommand per job (train today; preprocess, generate, serve,
// eval, convert and plan as they land).
#include <malloc.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "core/check.h"
#include "train/arguments.h"
#include "train/trainer.h"

namespace {

constexpr const char* kUsage =
    "usage: tessera <command> [flags]\n"
    "\n"
    "commands:\n"
    "  train    train a GPT model (Megatron-LM flags; tessera train --help lists them)\n";

int run_train(const std::vector<std::string>& args) {
  tessera::train::TrainArguments parsed;
  try {
    parsed = tessera::train::parse_train_arguments(args);
  } catch (const tessera::train::HelpRequested& help) {
    std::cout << help.text;
    return 0;
  }
  tessera::train::Trainer trainer(std::move(parsed));
  trainer.train();
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
