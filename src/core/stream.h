// An opaque stream handle, so that kernels and collectives can take one in their signatures without
// the layers above seeing CUDA headers. On the CPU every kernel runs synchronously on the calling
// thread: the one stream is the default one and a Stream is accepted and ignored. A CUDA backend puts
// its cudaStream_t in `native` (null means the device's default stream, as cudaStream_t 0 does).
#pragma once

#include "core/dtype.h"

namespace tessera {

struct Stream {
  Device device;
  void* native = nullptr;

  // The stream work runs on when the caller names none.
  static Stream default_for(Device device) { return Stream{device, nullptr}; }
  bool is_default() const { return native == nullptr; }
  bool operator==(const Stream&) const = default;
};

}  // namespace tessera
