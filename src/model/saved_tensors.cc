#include "model/saved_tensors.h"

#include <algorithm>
#include <vector>

#include "kernels/precision.h"

namespace tessera::model {

int64_t SavedTensors::bytes() const {
  int64_t total = 0;
  const_cast<SavedTensors*>(this)->visit([&](Tensor& t, bool) {
    if (t.defined()) total += static_cast<int64_t>(t.nbytes());
  });
  return total;
}

void SavedTensors::store_activations_as(DType type) {
  std::vector<Tensor*> activations;
  visit([&](Tensor& t, bool activation) {
    if (activation) activations.push_back(&t);
  });
  kernels::store_all_as(type, activations);
}

DType SavedTensors::widen_activations() {
  std::vector<const Tensor*> gemm_only;
  visit_gemm_inputs([&](Tensor& t) { gemm_only.push_back(&t); });
  auto stays_16bit = [&](const Tensor& t) {
    return t.defined() && t.dtype() != DType::F32 && kernels::gemm_buffer_type(t.dtype(), t.device()) == t.dtype() &&
           std::find(gemm_only.begin(), gemm_only.end(), &t) != gemm_only.end();
  };
  std::vector<Tensor*> activations;
  DType kept = DType::F32;
  visit([&](Tensor& t, bool activation) {
    if (!activation) return;
    if (t.defined() && t.dtype() != DType::F32) kept = t.dtype();
    if (!stays_16bit(t)) activations.push_back(&t);
  });
  kernels::all_to_fp32(activations);
  return kept;
}

}  // namespace tessera::model
