#include "train/async_checkpoint.h"

#include <exception>

#include "core/check.h"
#include "core/timer.h"

namespace tessera::train {

CheckpointWriter::CheckpointWriter(std::unique_ptr<ckpt::CheckpointSave> save,
                                   std::function<void(const std::string&)> after_file, bool background)
    : save_(std::move(save)), after_file_(std::move(after_file)) {
  if (background)
    thread_ = std::thread([this] { run(); });
  else
    run();
}

CheckpointWriter::~CheckpointWriter() {
  cancel_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::wait() {
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::run() {
  Timer timer;
  try {
    save_->write([this](const std::string& file) {
      if (after_file_) after_file_(file);
      if (cancel_.load(std::memory_order_relaxed)) throw Error("the save was abandoned");
    });
  } catch (const std::exception& e) {
    error_ = e.what();
    if (error_.empty()) error_ = "unknown error";
  } catch (...) {
    error_ = "unknown error";
  }
  seconds_ = timer.seconds();
  done_.store(true, std::memory_order_release);
}

}  // namespace tessera::train
