// Writes scalar summaries as a TensorBoard event file, with no TensorFlow or protobuf dependency.
//
// An event file is a sequence of TFRecords, each holding one serialised tensorflow.Event protobuf.
// The few messages and fields we need are encoded by hand (tensorboard_writer.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tessera::train {

// CRC-32C (Castagnoli), as used by TFRecord framing.
uint32_t crc32c(const void* data, size_t n);
// TFRecord stores CRCs "masked", so a CRC of data that itself contains CRCs is less degenerate.
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  // Creates `log_dir` if missing and a new file events.out.tfevents.<unix seconds>.<hostname> in it
  // (with a ".<n>" suffix if a writer already made that file in the same second).
  explicit TensorBoardWriter(const std::string& log_dir);
  ~TensorBoardWriter();  // flushes
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Appends one scalar. Records are buffered; call flush() to make them visible to TensorBoard.
  void add_scalar(const std::string& tag, float value, int64_t step);
  void flush();

  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace tessera::train
