// The rules of --device (Tessera's own flag; Megatron has none): cpu, cuda or cuda:N, what the GPU path
// runs (issue 39, step 1: one rank, a dense GPT), and the device chosen when the flag is left out. A run
// the GPU path does not run yet is refused by name with --device cuda, and trains on the CPU without it.
#include "train/args/argument_rules.h"
#include "train/args/arguments.h"
#include "train/device_setup.h"

namespace tessera::train {

using rules::require;

std::string gpu_path_refusal(const TrainArguments& a) {
  // Each names the flag as the user gave it. One rank on one GPU, a dense GPT: what issue 39's step 1
  // trains; the rest reads or writes tensor memory on the host inside the step (the samplers, the
  // Ouroboros driver, the teacher) or needs collectives on device memory (NCCL comes later).
  auto not_yet = [](const std::string& what) { return str_cat("the GPU path does not run ", what, " yet"); };
  if (a.world_size > 1)
    return str_cat("the GPU path trains on one rank; this job has ", a.world_size,
                   " ranks (several GPUs come later)");
  if (a.tensor_model_parallel_size > 1)
    return not_yet(str_cat("--tensor-model-parallel-size=", a.tensor_model_parallel_size));
  if (a.pipeline_model_parallel_size > 1)
    return not_yet(str_cat("--pipeline-model-parallel-size=", a.pipeline_model_parallel_size));
  if (a.context_parallel_size > 1) return not_yet(str_cat("--context-parallel-size=", a.context_parallel_size));
  if (a.expert_model_parallel_size > 1)
    return not_yet(str_cat("--expert-model-parallel-size=", a.expert_model_parallel_size));
  if (a.model.moe.enabled()) return not_yet("mixture of experts (--num-experts)");
  if (a.model.mla.enabled) return not_yet("multi-latent attention (--multi-latent-attention)");
  // The modules' concatenation and column gather use the CPU-only column copies (kernels/column_copy.h).
  if (a.model.mtp_num_layers > 0)
    return not_yet(str_cat("multi-token prediction (--mtp-num-layers=", a.model.mtp_num_layers, ")"));
  if (a.model.family != "gpt") return not_yet(str_cat("--model-family=", a.model.family, " (GPT models only)"));
  if (a.pipeline_schedule == "ouroboros") return not_yet("--pipeline-schedule=ouroboros");
  if (!a.pipeline_token_slices.empty()) return not_yet(str_cat("--pipeline-token-slices=", a.pipeline_token_slices));
  if (a.kd) return not_yet("knowledge distillation (--kd)");
  if (a.use_distributed_optimizer) return not_yet("--use-distributed-optimizer");
  if (a.sample_interval > 0)
    return not_yet(str_cat("--sample-interval=", a.sample_interval, " (generation on the GPU comes later)"));
  return "";
}

void finalize_device(TrainArguments& a, const DeviceProbe& probe) {
  const char* flag = "--device";
  const std::string& v = a.device_flag;
  if (v == "cpu") {
    a.device = Device::cpu();
    a.device_reason = "--device cpu";
    return;
  }
  if (v.empty()) {  // chosen here, and said why on start-up
    a.device = Device::cpu();
    if (!probe.cuda_build || probe.cuda_devices == 0) {
      a.device_reason = probe.why_none;
    } else if (const std::string refusal = gpu_path_refusal(a); !refusal.empty()) {
      a.device_reason = str_cat("cuda:0 is present, but ", refusal);
    } else {
      a.device = Device{DeviceType::CUDA, 0};
      a.device_reason = probe.names.empty() ? std::string("a CUDA device") : probe.names[0];
    }
    return;
  }
  int ordinal = 0;
  if (v != "cuda") {
    const bool numbered = v.rfind("cuda:", 0) == 0 && v.size() > 5 && v.size() <= 8 &&
                          v.find_first_not_of("0123456789", 5) == std::string::npos;
    require(numbered, flag, v, "must be cpu, cuda or cuda:N");
    ordinal = std::stoi(v.substr(5));
  }
  // What the GPU path does not run first: the answer is the same on every machine.
  const std::string refusal = gpu_path_refusal(a);
  require(refusal.empty(), flag, v, refusal + "; leave --device out or use --device cpu");
  require(probe.cuda_build && probe.cuda_devices > 0, flag, v, str_cat("no usable GPU: ", probe.why_none));
  require(ordinal < probe.cuda_devices, flag, v,
          str_cat("this machine has ", probe.cuda_devices, " CUDA device", probe.cuda_devices == 1 ? "" : "s",
                  " (cuda:0", probe.cuda_devices > 1 ? str_cat(" to cuda:", probe.cuda_devices - 1) : "", ")"));
  a.device = Device{DeviceType::CUDA, ordinal};
  a.device_reason = str_cat(static_cast<size_t>(ordinal) < probe.names.size() ? probe.names[ordinal] : "a CUDA device",
                            ", --device ", v);
}

void finalize_device(TrainArguments& a) {
  // --device cpu asks nothing of CUDA (a CPU run never initialises its driver).
  finalize_device(a, a.device_flag == "cpu" ? DeviceProbe{} : probe_devices());
}

std::string device_line(const TrainArguments& a) { return str_cat("device: ", a.device.str(), " (", a.device_reason, ")"); }

}  // namespace tessera::train
