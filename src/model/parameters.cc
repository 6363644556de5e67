#include "model/parameters.h"

#include "core/philox.h"
#include "core/profiler.h"
#include "kernels/packed_linear.h"
#include "kernels/precision.h"
#include "kernels/shard_layout.h"
#include "kernels/tensor_ops.h"

namespace tessera::model {

Parameter* ParameterSet::add(ParameterSpec spec) {
  TESSERA_CHECK(!allocated(), "parameter ", spec.name, " declared after the buffers were allocated");
  for (const Parameter& p : params_) TESSERA_CHECK(p.spec.name != spec.name, "duplicate parameter ", spec.name);
  Parameter& p = params_.emplace_back();
  p.offset = numel_;
  numel_ += shape_numel(spec.shape);
  p.spec = std::move(spec);
  return &p;
}

void ParameterSet::allocate(uint64_t seed, bool with_grads) {
  values_ = Tensor::empty({numel_});
  if (with_grads) grads_ = Tensor::zeros({numel_});
  // The initial values are made on the host (the initialisers are CPU kernels, run once) and moved to
  // the buffers' device (the default device: core/tensor.h) in one transfer.
  const bool on_host = values_.device() == Device::cpu();
  const Tensor initial = on_host ? values_ : Tensor::empty({numel_}, DType::F32, Device::cpu());
  for (Parameter& p : params_) {
    int64_t n = shape_numel(p.spec.shape);
    p.value = values_.flat_range(p.offset, n).view(p.spec.shape);
    if (with_grads) p.grad = grads_.flat_range(p.offset, n).view(p.spec.shape);
    initialize_parameter(p.spec, seed, initial.flat_range(p.offset, n).view(p.spec.shape));
  }
  if (!on_host) kernels::transfer(values_, initial);
}

Tensor ParameterSet::rounded_value(const Parameter& p, DType t) const {
  if (t == DType::F32 || t != rounded_type_ || !kernels::reuse_rounded_inputs()) return Tensor();
  RoundedCopy& copy = rounded_[&p];
  // On a GPU the copy is the 16-bit buffer its GEMMs read (2 bytes an element), on the CPU the fp32
  // numbers oneDNN reads; a switch of kernels::gpu_16bit_gemm_buffers takes effect at the next refresh.
  const DType storage = kernels::gemm_buffer_type(t, p.value.device());
  if (copy.epoch != weights_epoch_ || copy.values.dtype() != storage) {
    TESSERA_PROFILE_SCOPE("round_weights");
    if (storage != DType::F32) {
      copy.values = kernels::store_as(storage, p.value);
    } else {
      if (!copy.values.defined() || copy.values.dtype() != DType::F32)
        copy.values = Tensor::empty(p.value.shape(), DType::F32, p.value.device());
      kernels::round_to(t, p.value, copy.values);
    }
    copy.epoch = weights_epoch_;
  }
  return copy.values;
}

Tensor ParameterSet::packed_value(const Parameter& p) const {
  if (!keep_packed_) return Tensor();
  std::lock_guard<std::mutex> lock(packed_mutex_);
  RoundedCopy& copy = packed_[&p];
  if (copy.epoch != weights_epoch_) {
    TESSERA_PROFILE_SCOPE("pack_weights");
    copy.values = kernels::pack_linear_weight(p.value);
    copy.epoch = weights_epoch_;
  }
  return copy.values;
}

int64_t ParameterSet::rounded_weight_bytes() const {
  int64_t total = 0;
  for (const auto& [p, copy] : rounded_) total += static_cast<int64_t>(copy.values.nbytes());
  return total;
}

int64_t ParameterSet::gemm_weight_bytes(DType storage) const {
  int64_t total = 0;
  for (const Parameter& p : params_)
    if (p.spec.gemm_weight) total += shape_numel(p.spec.shape) * static_cast<int64_t>(dtype_size(storage));
  return total;
}

Parameter& ParameterSet::get(const std::string& name) {
  if (Parameter* p = find(name)) return *p;
  throw Error(str_cat("no parameter named ", name));
}

Parameter* ParameterSet::find(const std::string& name) {
  for (Parameter& p : params_)
    if (p.spec.name == name) return &p;
  return nullptr;
}

int64_t Sharding::global_index(int64_t local_index) const { return kernels::full_index(place(), local_index); }

Shape ParameterSpec::global_shape() const {
  return sharding.sharded() ? sharding.full_shape : shape;
}

Tensor gather_full_tensor(const ParameterSpec& spec, const Tensor& local, comm::ProcessGroup& group) {
  if (!spec.sharding.sharded()) return local.clone();
  const int64_t n = local.numel();
  Tensor all = Tensor::empty({group.size() * n});
  group.all_gather(local.view({n}), all);
  Tensor full = Tensor::empty(spec.global_shape());
  kernels::place_shards(all, group.size(), full, spec.sharding.place());
  return full;
}

void initialize_parameter(const ParameterSpec& spec, uint64_t seed, const Tensor& out) {
  check_shape(out, spec.shape, spec.name.c_str());
  switch (spec.init) {
    case Init::Zeros: out.fill_(0.0f); return;
    case Init::Ones: out.fill_(1.0f); return;
    case Init::Normal:
      kernels::fill_normal(out, spec.std, seed, hash_name(spec.name), spec.sharding.place());
      return;
  }
}

}  // namespace tessera::model
