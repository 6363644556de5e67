// A checkpoint's files written while training goes on (--async-save, Megatron's flag). The background
// thread runs ckpt::CheckpointSave::write and nothing else: the preparation (a barrier, the copies into
// host buffers), the agreement that every rank's files are complete and the finalisation that moves the
// tracker are collective and stay on the training thread (Trainer::finish_pending_save), so collectives
// keep one order on every rank and MPI needs no thread support (MPI_THREAD_MULTIPLE).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "ckpt/checkpoint.h"

namespace tessera::train {

class CheckpointWriter {
 public:
  // background: writes on a thread of its own; else writes now, on the calling thread (a synchronous
  // save), keeping the outcome the same way. after_file: CheckpointSave::write's hook.
  CheckpointWriter(std::unique_ptr<ckpt::CheckpointSave> save, std::function<void(const std::string&)> after_file,
                   bool background);
  // A write still running is stopped after its current file, and the thread joined: the buffers it reads
  // go away with this (an error ending training while a save is under way).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  bool done() const { return done_.load(std::memory_order_acquire); }  // completed or failed
  void wait();                                                         // until done()
  // After done(): the write's error ("" when it completed) and how long it took.
  const std::string& error() const { return error_; }
  double write_seconds() const { return seconds_; }
  ckpt::CheckpointSave& save() { return *save_; }

 private:
  void run();

  std::unique_ptr<ckpt::CheckpointSave> save_;
  std::function<void(const std::string&)> after_file_;
  std::atomic<bool> done_{false}, cancel_{false};
  std::string error_;
  double seconds_ = 0;
  std::thread thread_;
};

}  // namespace tessera::train
