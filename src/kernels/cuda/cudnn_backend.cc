#if __has_include(<cudnn_graph.h>)
#include "kernels/cuda/cudnn_backend.h"

#include <dlfcn.h>

#include "core/check.h"
#include "kernels/cudnn_library.h"

namespace tessera::kernels::cuda::cudnn {

const Api& api() {
  static const Api a = [] {
    const CudnnLibrary& lib = cudnn_library();
    Api out;
#define TESSERA_RESOLVE(name) out.name = reinterpret_cast<decltype(out.name)>(lib.symbol(#name));
    TESSERA_CUDNN_FUNCTIONS(TESSERA_RESOLVE)
#undef TESSERA_RESOLVE
    return out;
  }();
  return a;
}

void check(cudnnStatus_t status, const std::string& what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  const Api& a = api();
  char last[1024] = {0};
  a.cudnnGetLastErrorString(last, sizeof(last));
  throw Error(str_cat("cuDNN: ", what, " failed: ", a.cudnnGetErrorString(status), last[0] ? " (" : "", last,
                      last[0] ? ")" : ""));
}

Descriptor::Descriptor(cudnnBackendDescriptorType_t type, std::string what) : what_(std::move(what)) {
  check(api().cudnnBackendCreateDescriptor(type, &desc_), str_cat("creating the descriptor of ", what_));
}

Descriptor::~Descriptor() {
  if (desc_ != nullptr) api().cudnnBackendDestroyDescriptor(desc_);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, const char* attribute,
                            cudnnBackendAttributeType_t type, int64_t count, const void* values) {
  check(api().cudnnBackendSetAttribute(desc_, name, type, count, values), str_cat(what_, ": setting ", attribute));
  return *this;
}

Descriptor& Descriptor::set_int64(cudnnBackendAttributeName_t name, const char* attribute, int64_t value) {
  return set(name, attribute, CUDNN_TYPE_INT64, 1, &value);
}

Descriptor& Descriptor::set_int64s(cudnnBackendAttributeName_t name, const char* attribute,
                                   const std::vector<int64_t>& values) {
  return set(name, attribute, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data());
}

Descriptor& Descriptor::set_data_type(cudnnBackendAttributeName_t name, const char* attribute, cudnnDataType_t value) {
  return set(name, attribute, CUDNN_TYPE_DATA_TYPE, 1, &value);
}

Descriptor& Descriptor::set_bool(cudnnBackendAttributeName_t name, const char* attribute, bool value) {
  return set(name, attribute, CUDNN_TYPE_BOOLEAN, 1, &value);
}

Descriptor& Descriptor::set_descriptor(cudnnBackendAttributeName_t name, const char* attribute,
                                       const Descriptor& value) {
  cudnnBackendDescriptor_t d = value.get();
  return set(name, attribute, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}

Descriptor& Descriptor::finalize() {
  check(api().cudnnBackendFinalize(desc_), str_cat("finalizing ", what_));
  return *this;
}

}  // namespace tessera::kernels::cuda::cudnn
#endif  // __has_include(<cudnn_graph.h>)
