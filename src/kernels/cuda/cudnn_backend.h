// cuDNN's backend (graph) API as kernels/cuda/cudnn_sdpa*.cc use it: the entry points resolved from the
// library kernels/cudnn_library.h loads at run time (nothing links cuDNN), cuDNN's failures as
// tessera::Error naming what was being built and cuDNN's own last message, and an owning handle of one
// backend descriptor. Include only where __has_include(<cudnn_graph.h>) (the toolkit ships the header;
// kernels/cuda/cudnn_sdpa.h says what a build without it does).
#pragma once

#include <cudnn_graph.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera::kernels::cuda::cudnn {

// The cuDNN functions used, typed by cudnn_graph.h, resolved from kernels::cudnn_library().
#define TESSERA_CUDNN_FUNCTIONS(X)                                                                       \
  X(cudnnGetErrorString) X(cudnnGetLastErrorString) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream)     \
  X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor) X(cudnnBackendSetAttribute)           \
  X(cudnnBackendGetAttribute) X(cudnnBackendFinalize) X(cudnnBackendExecute)

struct Api {
#define TESSERA_DECLARE(name) decltype(&::name) name = nullptr;
  TESSERA_CUDNN_FUNCTIONS(TESSERA_DECLARE)
#undef TESSERA_DECLARE
};

// Loads cuDNN on first use (kernels::cudnn_library()'s Error where it cannot).
const Api& api();

// An Error naming `what`, cuDNN's status and its last error message, unless `status` is success.
void check(cudnnStatus_t status, const std::string& what);

// One backend descriptor, destroyed with its owner. `what` names it in errors ("SDPA forward: tensor Q").
class Descriptor {
 public:
  Descriptor(cudnnBackendDescriptorType_t type, std::string what);
  ~Descriptor();
  Descriptor(Descriptor&& other) noexcept
      : desc_(std::exchange(other.desc_, nullptr)), what_(std::move(other.what_)) {}
  Descriptor& operator=(Descriptor&&) = delete;
  Descriptor(const Descriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }
  const std::string& what() const { return what_; }

  // Each setter takes the attribute and its spelling (TESSERA_CUDNN_ATTR below), then the values.
  Descriptor& set(cudnnBackendAttributeName_t name, const char* attribute, cudnnBackendAttributeType_t type,
                  int64_t count, const void* values);
  Descriptor& set_int64(cudnnBackendAttributeName_t name, const char* attribute, int64_t value);
  Descriptor& set_int64s(cudnnBackendAttributeName_t name, const char* attribute, const std::vector<int64_t>& values);
  Descriptor& set_data_type(cudnnBackendAttributeName_t name, const char* attribute, cudnnDataType_t value);
  Descriptor& set_bool(cudnnBackendAttributeName_t name, const char* attribute, bool value);
  Descriptor& set_descriptor(cudnnBackendAttributeName_t name, const char* attribute, const Descriptor& value);
  Descriptor& finalize();

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
  std::string what_;
};

// TESSERA_CUDNN_ATTR(CUDNN_ATTR_TENSOR_UNIQUE_ID) passes the attribute and its spelling, so that a refused
// attribute is named in the error.
#define TESSERA_CUDNN_ATTR(name) name, #name

}  // namespace tessera::kernels::cuda::cudnn
