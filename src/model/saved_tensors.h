// A record of the tensors a module keeps from its forward for its backward. Each record lists its
// tensors once (visit); counting their bytes, storing them in 16 bits under mixed precision and
// widening them again for backward are written here, once for every module.
#pragma once

#include <functional>

#include "core/tensor.h"

namespace tessera::model {

class SavedTensors {
 public:
  virtual ~SavedTensors() = default;
  // Calls f on every kept tensor; `activation` is false for statistics (norm mean and rstd, the
  // log-sum-exp), which stay fp32 under mixed precision as Megatron keeps them.
  virtual void visit(const std::function<void(Tensor&, bool activation)>& f) = 0;
  // The kept activations (also visited above) that backward hands to GEMMs as they are, as an MLP's
  // activation only feeds fc2's dW product, a pre-LN norm's output its slot's linear layers and the
  // attention output linear_proj's: any other reader widens such a tensor itself where it reads it
  // (kernels::to_fp32: the attention kernels, sequence parallelism's gather). None unless a record says so.
  virtual void visit_gemm_inputs(const std::function<void(Tensor&)>& f) {}

  int64_t bytes() const;  // of every defined tensor (each is its own allocation)
  // Under mixed precision the activations are kept in the 16-bit type t, as Megatron keeps them.
  void store_activations_as(DType t);
  // Back to fp32 in place, for backward; returns the type they were kept in (F32 when none was 16-bit),
  // so that GEMMs know the widened values are already rounded to it. A GEMM-only input (above) stays in
  // 16 bits where its device's GEMMs read 16-bit buffers (kernels::gemm_buffer_type: a GPU): its
  // forward encoding is what the backward's dW product reads, not widened and encoded again.
  DType widen_activations();
};

}  // namespace tessera::model
