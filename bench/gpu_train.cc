// Training steps of a GPT on one GPU (issue 39's device check): GptModel and AdamWOptimizer on cuda:0
// through a DefaultDeviceScope, mock tokens, forward + backward + the gradient norm + AdamW per step,
// timed after warm-up with the device synchronised. Prints tokens/s, Megatron's model TFLOP/s
// (model::model_flops_per_iteration, the count Megatron's log line uses) and the MFU against the
// device's dense peak (989 TFLOP/s bf16 for H100/H200 SXM, the planner's entry; --peak-tflops for
// another GPU). A benchmark, not a test: the GPU's losses are checked against the CPU's in
// src/optim/cuda/cuda_training_test.cc. Also prints the device allocator's peak memory in use (what
// torch.cuda.max_memory_allocated counts for bench/torch_gpt.py) and a machine-readable line,
//   BENCH_GPU_TRAIN preset=... dtype=... mbs=... dropout=... attention=... ms=... tokens_per_s=...
//     tflops=... mfu=... peak_mem_mib=...
// which scripts/gpu_step2_check.sh tabulates beside PyTorch's.
//
// Run: bench_gpu_train [--preset gpt2-124M|gpt2-350M] [--bf16] [--mbs B] [--seq S] [--dropout P]
//                      [--warmup W] [--iters N] [--peak-tflops P] [--cluster-output FILE]
// --cluster-output writes the measured step as a cluster file's "measured_step" object (the model by
// Megatron's flag names and elapsed_time_per_iteration_ms), which `tessera plan --cluster FILE` fits the
// device's GEMM efficiency to (plan/measured_calibration.h).
// --dropout sets --hidden-dropout and --attention-dropout (Megatron's 0.1 by default; 0 as llm.c and
// PyTorch's GPT-2 baselines run).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/philox.h"
#include "core/timer.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/tensor_ops.h"
#include "model/batch_layout.h"
#include "model/gpt_model.h"
#include "optim/adamw_optimizer.h"

using namespace tessera;

namespace {

struct Options {
  std::string preset = "gpt2-124M";
  bool bf16 = false;
  int64_t mbs = 8, seq = 1024;
  float dropout = 0.1f;
  int warmup = 3, iters = 10;
  double peak_tflops = 989;
  std::string cluster_output;
};

// GPT-2 small and medium as Megatron's examples train them (learned positions, LayerNorm, GELU, tied,
// biases; the GPT-2 vocabulary padded to 50304), dropout as Megatron's defaults.
model::ModelConfig preset(const Options& o) {
  model::ModelConfig c;
  if (o.preset == "gpt2-124M") {
    c.num_layers = 12, c.hidden_size = 768, c.num_attention_heads = 12;
  } else if (o.preset == "gpt2-350M") {
    c.num_layers = 24, c.hidden_size = 1024, c.num_attention_heads = 16;
  } else {
    std::fprintf(stderr, "bench_gpu_train: --preset %s is not one of gpt2-124M, gpt2-350M\n", o.preset.c_str());
    std::exit(2);
  }
  c.num_query_groups = c.num_attention_heads;
  c.kv_channels = c.hidden_size / c.num_attention_heads;
  c.ffn_hidden_size = 4 * c.hidden_size;
  c.seq_length = c.max_position_embeddings = o.seq;
  c.vocab_size = 50257;
  c.padded_vocab_size = 50304;
  c.params_dtype = o.bf16 ? DType::BF16 : DType::F32;
  c.hidden_dropout = c.attention_dropout = o.dropout;
  return c;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_gpu_train: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--preset") o.preset = value();
    else if (a == "--bf16") o.bf16 = true;
    else if (a == "--mbs") o.mbs = std::atoll(value());
    else if (a == "--seq") o.seq = std::atoll(value());
    else if (a == "--dropout") o.dropout = std::strtof(value(), nullptr);
    else if (a == "--warmup") o.warmup = std::atoi(value());
    else if (a == "--iters") o.iters = std::atoi(value());
    else if (a == "--peak-tflops") o.peak_tflops = std::atof(value());
    else if (a == "--cluster-output") o.cluster_output = value();
    else {
      std::fprintf(stderr, "bench_gpu_train: unknown flag %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.mbs < 1 || o.seq < 1 || o.warmup < 0 || o.iters < 1 || o.peak_tflops <= 0) {
    std::fprintf(stderr, "bench_gpu_train: --mbs, --seq, --iters and --peak-tflops must be positive\n");
    std::exit(2);
  }
  if (!(o.dropout >= 0.0f && o.dropout < 1.0f)) {
    std::fprintf(stderr, "bench_gpu_train: --dropout %g must be in [0, 1)\n", static_cast<double>(o.dropout));
    std::exit(2);
  }
  return o;
}

// Mock tokens on the host (the data loader's side), moved to the GPU as the trainer's batches are.
model::MicroBatch mock_batch(const model::ModelConfig& c, int64_t batch, uint64_t seed, Device device) {
  const int64_t n = batch * c.seq_length;
  Tensor tokens = Tensor::empty({batch, c.seq_length}, DType::I32, Device::cpu());
  Tensor labels = Tensor::empty({batch, c.seq_length}, DType::I32, Device::cpu());
  Tensor mask = Tensor::empty({batch, c.seq_length}, DType::F32, Device::cpu());
  PhiloxStream s(seed, 3);
  for (int64_t i = 0; i < n; ++i) {
    tokens.i32()[i] = static_cast<int32_t>(s.bits(2 * i) % c.vocab_size);
    labels.i32()[i] = static_cast<int32_t>(s.bits(2 * i + 1) % c.vocab_size);
    mask.f32()[i] = 1.0f;
  }
  model::MicroBatch mb;
  // Checked here, on the host, as the trainer does (train/device_setup.h): the model does not copy them
  // back from the GPU to check them.
  model::check_ids(tokens, c.vocab_size, "token");
  model::check_ids(labels, c.vocab_size, "label");
  mb.ids_checked_below = c.vocab_size;
  mb.tokens = kernels::to_device(tokens, device);
  mb.labels = kernels::to_device(labels, device);
  mb.loss_mask = kernels::to_device(mask, device);
  return mb;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const model::ModelConfig c = preset(o);
  std::string why;
  if (cuda::device_count(&why) == 0) {
    std::printf("bench_gpu_train: skipped: %s\n", why.c_str());
    return 0;
  }
  cuda::register_device_allocators();
  cuda::register_gemm_backend();
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const Device gpu{DeviceType::CUDA, 0};
  try {
    DefaultDeviceScope scope(gpu);
    model::ParameterSet params;
    model::GptModel gpt(c, params);
    params.allocate(1234);
    if (o.bf16) params.cache_rounded_weights(DType::BF16);
    optim::AdamWOptimizer optimizer(params, optim::AdamWConfig{0.1f, 0.9f, 0.95f, 1e-8f, 1.0f});
    const model::MicroBatch mb = mock_batch(c, o.mbs, 7, gpu);
    model::ForwardContext ctx;
    ctx.seed = 1, ctx.training = true, ctx.seq = c.seq_length, ctx.batch = o.mbs;
    double loss = 0;
    auto step = [&](int64_t iteration) {
      ctx.iteration = iteration;
      params.grads().zero_();
      model::GptActivations rec;
      loss = gpt.forward(mb, ctx, rec) / static_cast<double>(o.mbs * c.seq_length);  // the summed loss, per token
      gpt.backward(rec, ctx, 1.0f / static_cast<float>(o.mbs * c.seq_length));
      optimizer.step(1e-4f);
      params.weights_changed();
    };
    for (int i = 0; i < o.warmup; ++i) step(i);
    cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    Timer timer;
    for (int i = 0; i < o.iters; ++i) step(o.warmup + i);
    cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const double seconds = timer.seconds() / o.iters;
    const double tokens = static_cast<double>(o.mbs * c.seq_length);
    const double tflops = model::model_flops_per_iteration(c, o.mbs) / seconds / 1e12;
    const double peak_mib =
        static_cast<double>(cuda::device_allocator(0).stats().peak_in_use_bytes) / (1024.0 * 1024.0);
    std::printf("bench_gpu_train: %s on %s, %s, micro-batch %lld x %lld, dropout %g, %d steps after %d warm-up\n",
                o.preset.c_str(), prop.name, o.bf16 ? "bf16" : "fp32", static_cast<long long>(o.mbs),
                static_cast<long long>(c.seq_length), static_cast<double>(o.dropout), o.iters, o.warmup);
    // The TESSERA_CUDA_ATTENTION name of the kernels that ran.
    const char* attention = "rows";
    switch (kernels::cuda::attention_kernels()) {
      case kernels::cuda::AttentionKernels::kTiled: attention = "tiled"; break;
      case kernels::cuda::AttentionKernels::kBatchedGemm: attention = "gemm"; break;
      case kernels::cuda::AttentionKernels::kBatchedGemmBf16: attention = "gemm_bf16"; break;
      case kernels::cuda::AttentionKernels::kCudnn: attention = "cudnn"; break;
      case kernels::cuda::AttentionKernels::kRowPerWarp: break;
    }
    std::printf("%-10s %-5s %-9s %10s %12s %12s %10s %8s %10s  (MFU against %.0f TFLOP/s dense)\n", "model",
                "type", "attention", "ms/step", "tokens/s", "TFLOP/s", "loss", "MFU", "peak MiB", o.peak_tflops);
    std::printf("%-10s %-5s %-9s %10.1f %12.0f %12.1f %10.4f %7.2f%% %10.0f\n", o.preset.c_str(),
                o.bf16 ? "bf16" : "fp32", attention, seconds * 1e3, tokens / seconds, tflops, loss,
                100.0 * tflops / o.peak_tflops, peak_mib);
    std::printf("BENCH_GPU_TRAIN preset=%s dtype=%s mbs=%lld dropout=%g attention=%s ms=%.2f tokens_per_s=%.0f "
                "tflops=%.2f mfu=%.2f peak_mem_mib=%.0f\n",
                o.preset.c_str(), o.bf16 ? "bf16" : "fp32", static_cast<long long>(o.mbs),
                static_cast<double>(o.dropout), attention, seconds * 1e3, tokens / seconds, tflops,
                100.0 * tflops / o.peak_tflops, peak_mib);
    if (!o.cluster_output.empty()) {
      const nlohmann::json step = {
          {"source", std::string("bench_gpu_train ") + o.preset + " on " + prop.name},
          {"num_layers", c.num_layers}, {"hidden_size", c.hidden_size}, {"num_attention_heads", c.num_attention_heads},
          {"ffn_hidden_size", c.ffn_hidden_size}, {"seq_length", c.seq_length},
          {"padded_vocab_size", c.padded_vocab_size}, {"hidden_dropout", c.hidden_dropout},
          {"attention_dropout", c.attention_dropout}, {"micro_batch_size", o.mbs},
          {"precision", o.bf16 ? "bf16" : "fp32"}, {"elapsed_time_per_iteration_ms", seconds * 1e3}};
      write_file_atomically(o.cluster_output, nlohmann::json{{"measured_step", step}}.dump(2) + "\n");
      std::printf("wrote %s (tessera plan --cluster %s)\n", o.cluster_output.c_str(), o.cluster_output.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
