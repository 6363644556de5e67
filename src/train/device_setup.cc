#include "train/device_setup.h"

#include <cstdlib>

#include "kernels/device_dispatch.h"
#include "kernels/tensor_ops.h"
#include "model/batch_layout.h"
#include "train/memory_report.h"

// The CUDA runtime only where the build has it: a CPU-only build compiles none of this.
#if defined(TESSERA_WITH_CUDA)
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/gemm_cublaslt.h"
#endif

namespace tessera::train {

DeviceProbe probe_devices() {
  DeviceProbe p;
  p.cuda_build = kernels::kWithCuda;
#if defined(TESSERA_WITH_CUDA)
  p.cuda_devices = cuda::device_count(&p.why_none);
  for (int i = 0; i < p.cuda_devices; ++i) {
    cudaDeviceProp prop{};
    // A name is only for the start-up line: a device that will not say it is still usable.
    p.names.push_back(cudaGetDeviceProperties(&prop, i) == cudaSuccess ? std::string(prop.name) : "a CUDA device");
  }
#else
  p.why_none = "this tessera was built without CUDA (no CUDA toolkit where it was built)";
#endif
  p.local = local_rank_from([](const char* name) { return std::getenv(name); });
  const char* opt_in = std::getenv(kUnverifiedGpuLayoutsVariable);
  p.unverified_layouts = opt_in != nullptr && std::string(opt_in) == "1";
  return p;
}

void prepare_device(Device device, int ranks_sharing) {
  if (device.type != DeviceType::CUDA) return;
#if defined(TESSERA_WITH_CUDA)
  // Ranks sharing the GPU each take an equal share; TESSERA_CUDA_MEMORY_CAP_MIB (read by the allocators
  // when given 0) wins.
  const size_t cap = std::getenv("TESSERA_CUDA_MEMORY_CAP_MIB") == nullptr
                         ? shared_gpu_memory_cap(cuda::memory_info(device.index).total_bytes, ranks_sharing)
                         : 0;
  cuda::register_device_allocators(cap, device.index);  // this rank's GPU only
  cuda::register_gemm_backend();
  // The kernels launch on the current device: this one, for the thread that trains.
  cuda::check(cudaSetDevice(device.index), "cudaSetDevice");
#else
  TESSERA_CHECK(false, "--device=", device.str(), ": this tessera was built without CUDA");
#endif
}

model::MicroBatch micro_batch_on(const model::MicroBatch& batch, Device device, int64_t vocab_size) {
  auto on = [&](const Tensor& t) { return t.defined() ? kernels::to_device(t, device) : Tensor(); };
  model::MicroBatch b = batch;  // sample_offset and anything not a tensor
  if (vocab_size > 0) {
    if (batch.tokens.defined()) model::check_ids(batch.tokens, vocab_size, "token");
    if (batch.labels.defined()) model::check_ids(batch.labels, vocab_size, "label");
    b.ids_checked_below = vocab_size;
  }
  // Every tensor of a MicroBatch. One added there belongs here too: left on the host, the first kernel
  // given it beside device tensors refuses it, naming both devices (kernels/device_dispatch.h).
  for (Tensor model::MicroBatch::*field :
       {&model::MicroBatch::tokens, &model::MicroBatch::labels, &model::MicroBatch::loss_mask,
        &model::MicroBatch::positions, &model::MicroBatch::doc_start, &model::MicroBatch::token_types,
        &model::MicroBatch::padding_mask, &model::MicroBatch::sentence_order, &model::MicroBatch::choice_label})
    b.*field = on(batch.*field);
  // The host's mask stays with the batch: counts of it need no copy back (MicroBatch::host_loss_mask).
  if (device.type != DeviceType::CPU && batch.loss_mask.defined() && batch.loss_mask.device().type == DeviceType::CPU)
    b.host_loss_mask = batch.loss_mask;
  return b;
}

std::string device_memory_summary(Device device) {
  if (device.type != DeviceType::CUDA) return "";
#if defined(TESSERA_WITH_CUDA)
  const CachingAllocatorStats s = cuda::device_allocator(device.index).stats();
  return str_cat(" | ", device.str(), " allocator (MB): in use ", megabytes(static_cast<double>(s.in_use_bytes)),
                 " (peak ", megabytes(static_cast<double>(s.peak_in_use_bytes)), "), reserved ",
                 megabytes(static_cast<double>(s.reserved_bytes)), " (peak ",
                 megabytes(static_cast<double>(s.peak_reserved_bytes)), ")");
#else
  return "";
#endif
}

}  // namespace tessera::train
