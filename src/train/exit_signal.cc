#include "train/exit_signal.h"

#include <csignal>

namespace tessera::train {
namespace {

volatile std::sig_atomic_t received_signal = 0;

extern "C" void on_exit_signal(int sig) {
  if (received_signal == 0) received_signal = sig;
}

}  // namespace

void install_exit_signal_handler() {
  struct sigaction action {};
  action.sa_handler = on_exit_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a signal must not fail a blocking read or wait of the training step
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

bool exit_signal_received_anywhere(comm::ProcessGroup& world) {
  Tensor flag = Tensor::zeros({1});
  flag.f32()[0] = received_signal != 0 ? 1.0f : 0.0f;
  if (world.size() > 1) world.all_reduce(flag);
  return flag.f32()[0] > 0;
}

const char* exit_signal_name() {
  switch (received_signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a signal on another rank";
  }
}

}  // namespace tessera::train
