// The rules of --device (Tessera's own flag; Megatron has none): cpu, cuda or cuda:N, what the GPU path
// runs (issue 39's step 1: one rank, a dense GPT; issue 56: the parallel layouts, unverified until the
// device check has run them; issues 53/50: multi-latent attention and multi-token prediction; issues
// 53/56: mixture of experts, expert parallelism among the unverified layouts; issues 50/56: BERT; issue 56:
// TeraPipe's token slices, unverified too), the GPU
// of each rank, and the device chosen when the flag is left out. A run the GPU path does not run is
// refused by name with --device cuda, and trains on the CPU without it.
#include <algorithm>

#include "comm/device_collectives.h"
#include "train/args/argument_rules.h"
#include "train/args/arguments.h"
#include "train/device_setup.h"
#include "train/gpu_choice.h"

namespace tessera::train {

using rules::require;

namespace {

// The layouts whose code path is device-clean (every collective through ProcessGroup on tensors, no host
// read of a device tensor) but that no GPU has run yet: each named as the user gave it, empty if none.
std::string unverified_layout(const TrainArguments& a) {
  if (a.pipeline_schedule == "ouroboros") return "--pipeline-schedule=ouroboros";  // its driver: device-clean too
  // Token slices even on one stage: their attention at an offset is what a device run must check.
  if (!a.pipeline_token_slices.empty()) return str_cat("--pipeline-token-slices=", a.pipeline_token_slices);
  if (a.tensor_model_parallel_size > 1) return str_cat("--tensor-model-parallel-size=", a.tensor_model_parallel_size);
  if (a.expert_model_parallel_size > 1)
    return str_cat("--expert-model-parallel-size=", a.expert_model_parallel_size);
  if (a.pipeline_model_parallel_size > 1)
    return str_cat("--pipeline-model-parallel-size=", a.pipeline_model_parallel_size);
  if (a.context_parallel_size > 1) return str_cat("--context-parallel-size=", a.context_parallel_size);
  if (a.use_distributed_optimizer) return "--use-distributed-optimizer";
  if (a.world_size > 1) return str_cat("data parallelism over ", a.world_size, " ranks");
  return "";
}

}  // namespace

std::string gpu_path_refusal(const TrainArguments& a, bool unverified_layouts) {
  // Each names the flag as the user gave it. What the GPU path cannot run at all first: the rest reads
  // or writes tensor memory on the host inside the step (the samplers, the
  // teacher). Multi-latent attention, multi-token prediction and mixture of experts run (issues 53/50/56:
  // their column copies and sums, the router, the token dispatch and the experts' GEMMs have CUDA
  // kernels, YaRN's RoPE is the rotary kernel's): on one GPU (scripts/gpu_step2_check.sh compares them
  // with the CPU), on several (expert parallelism included) behind the layouts' opt-in below.
  auto not_yet = [](const std::string& what) { return str_cat("the GPU path does not run ", what, " yet"); };
  // BERT runs too (issues 50/56): bidirectional attention over its padding mask, token types, the pooler's
  // tanh and the two heads' losses are kernels the GPU has; any other family is refused by name.
  if (a.model.family != "gpt" && a.model.family != "bert")
    return not_yet(str_cat("--model-family=", a.model.family, " (GPT and BERT models only)"));
  if (a.kd) return not_yet("knowledge distillation (--kd)");
  if (a.sample_interval > 0)
    return not_yet(str_cat("--sample-interval=", a.sample_interval, " (generation on the GPU comes later)"));
  // Then the layouts issue 56 brings to the GPU: refused until opted in, as no GPU has run them yet.
  if (const std::string layout = unverified_layout(a); !layout.empty() && !unverified_layouts)
    return str_cat("the GPU path runs ", layout, " only unverified (no device run has compared it with the CPU "
                   "yet: scripts/gpu_layouts_check.sh); set ", kUnverifiedGpuLayoutsVariable,
                   "=1 to run it anyway");
  return "";
}

void finalize_device(TrainArguments& a, const DeviceProbe& probe) {
  const char* flag = "--device";
  const std::string& v = a.device_flag;
  comm::parse_device_collectives(a.device_collectives);  // refuses a bad value on any device
  a.gpu_ranks_sharing = 1;
  if (v == "cpu") {
    a.device = Device::cpu();
    a.device_reason = "--device cpu";
    return;
  }
  auto on_gpu = [&](std::optional<int> named) {
    const GpuChoice c = choose_gpu(named, std::max(probe.cuda_devices, 1), probe.local);
    const std::string name = static_cast<size_t>(c.ordinal) < probe.names.size() ? probe.names[c.ordinal]
                                                                                 : std::string("a CUDA device");
    a.device = Device{DeviceType::CUDA, c.ordinal};
    a.gpu_ranks_sharing = c.ranks_sharing;
    // One rank: as before ("NVIDIA H200, --device cuda"); several: which GPU of the node and why.
    a.device_reason = str_cat(name, v.empty() ? "" : str_cat(", --device ", v));
    if (a.world_size > 1 || c.ranks_sharing > 1)
      a.device_reason += named ? (c.ranks_sharing > 1 ? str_cat(", shared by ", c.ranks_sharing, " ranks") : "")
                               : str_cat(", ", c.reason);
  };
  if (v.empty()) {  // chosen here, and said why on start-up
    a.device = Device::cpu();
    if (!probe.cuda_build || probe.cuda_devices == 0) {
      a.device_reason = probe.why_none;
    } else if (const std::string refusal = gpu_path_refusal(a, probe.unverified_layouts); !refusal.empty()) {
      a.device_reason = str_cat("cuda:0 is present, but ", refusal);
    } else {
      on_gpu(std::nullopt);
    }
    return;
  }
  std::optional<int> named;
  if (v != "cuda") {
    const bool numbered = v.rfind("cuda:", 0) == 0 && v.size() > 5 && v.size() <= 8 &&
                          v.find_first_not_of("0123456789", 5) == std::string::npos;
    require(numbered, flag, v, "must be cpu, cuda or cuda:N");
    named = std::stoi(v.substr(5));
  }
  // What the GPU path does not run first: the answer is the same on every machine.
  const std::string refusal = gpu_path_refusal(a, probe.unverified_layouts);
  require(refusal.empty(), flag, v, refusal + "; leave --device out or use --device cpu");
  require(probe.cuda_build && probe.cuda_devices > 0, flag, v, str_cat("no usable GPU: ", probe.why_none));
  require(named.value_or(0) < probe.cuda_devices, flag, v,
          str_cat("this machine has ", probe.cuda_devices, " CUDA device", probe.cuda_devices == 1 ? "" : "s",
                  " (cuda:0", probe.cuda_devices > 1 ? str_cat(" to cuda:", probe.cuda_devices - 1) : "", ")"));
  on_gpu(named);
}

void finalize_device(TrainArguments& a) {
  // --device cpu asks nothing of CUDA (a CPU run never initialises its driver).
  finalize_device(a, a.device_flag == "cpu" ? DeviceProbe{} : probe_devices());
}

std::string device_line(const TrainArguments& a) { return str_cat("device: ", a.device.str(), " (", a.device_reason, ")"); }

}  // namespace tessera::train
