// The device `tessera train` runs on (--device, Tessera's own flag; Megatron has none): what this build
// and machine offer, the rules of the flag, what the GPU path does not run yet, and the moves between the
// host and the device that the trainer makes. The data loader, the collectives' scalars and the log stay
// on the host; the model, its parameters and the optimizer's moments live on the device, each micro-batch
// is moved there just before its forward, and checkpoints are staged through the host (ckpt/).
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/language_model.h"
#include "train/args/arguments.h"
#include "train/gpu_choice.h"

namespace tessera::train {

// What this build on this machine offers (probe_devices), or what a test pretends it does.
struct DeviceProbe {
  bool cuda_build = false;         // compiled with the CUDA backend (TESSERA_WITH_CUDA)
  int cuda_devices = 0;            // usable CUDA devices
  std::string why_none;            // why there are none: CUDA's reason, or that the build has no CUDA
  std::vector<std::string> names;  // each device's name ("NVIDIA H200"), by ordinal
  LocalRank local;                 // this rank on its node, as the launcher said (train/gpu_choice.h)
  bool unverified_layouts = false;  // TESSERA_UNVERIFIED_GPU_LAYOUTS=1: the opt-in below
};

// The opt-in to the parallel layouts on GPUs (tp, sp, pp, cp, dp, the distributed optimizer) until the
// prepared device check (scripts/gpu_layouts_check.sh) has compared them with the CPU: their code is
// device-clean, but no GPU has run it.
inline constexpr const char* kUnverifiedGpuLayoutsVariable = "TESSERA_UNVERIFIED_GPU_LAYOUTS";
DeviceProbe probe_devices();

// The rule that keeps run `a` off the GPU path, e.g. "does not run --tensor-model-parallel-size=2 yet
// (...)"; empty when the path runs it (one rank, a dense GPT in GPT-2 or Llama style, fp32/bf16/fp16,
// recomputation, checkpoints).
// `unverified_layouts`: the opt-in above was given, and the layouts it names are not refused.
std::string gpu_path_refusal(const TrainArguments& a, bool unverified_layouts = false);

// The rules of --device against `probe`; fills a.device and a.device_reason (finalize_device in
// arguments.h asks probe_devices). Without the flag: cuda:0 where the build has CUDA, a GPU is usable
// and the run is one the GPU path runs, else the CPU, saying why.
void finalize_device(TrainArguments& a, const DeviceProbe& probe);

// "device: cuda:0 (NVIDIA H200)", "device: cpu (no CUDA device: ...)": the start-up line.
std::string device_line(const TrainArguments& a);

// Makes `device` ready before anything is allocated on it: on a CUDA device (CUDA builds only) the
// caching allocators, the cuBLASLt GEMM backend and the current device; nothing on the CPU. With
// `ranks_sharing` > 1 ranks on the GPU, its allocator is capped at an equal share of the GPU's memory
// (shared_gpu_memory_cap), unless TESSERA_CUDA_MEMORY_CAP_MIB sets the cap.
void prepare_device(Device device, int ranks_sharing = 1);

// The micro-batch with every tensor it has on `device` (the same tensors where they are there already,
// so the CPU path runs this too): the host batch the data loader made stays for the host's reads. With
// vocab_size > 0 its tokens and labels are checked on the host first (the model's error where one is
// outside [0, vocab_size)) and the batch says so (MicroBatch::ids_checked_below), so that the model does
// not copy them back from the device to check them.
model::MicroBatch micro_batch_on(const model::MicroBatch& batch, Device device, int64_t vocab_size = 0);

// The device allocator's counts for the memory log line (" | cuda:0 allocator (MB): ..."); empty on the
// CPU, whose tensors the log line's other fields count.
std::string device_memory_summary(Device device);

}  // namespace tessera::train
