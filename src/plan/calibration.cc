#include "plan/calibration.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "core/process_memory.h"
#include "core/tensor.h"
#include "core/timer.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"

namespace tessera::plan {
namespace {

// Runs `work` on every rank at once, as often as fits in `budget` seconds (the same count on every rank,
// since `work` may be a collective), and returns the fastest run's seconds, averaged over the ranks: on
// a shared machine the fastest run is the one least disturbed by other work.
template <typename Work>
double time_per_run(comm::ProcessGroup& world, double budget, Work work) {
  auto over_ranks = [&](double x, comm::ReduceOp op) {
    Tensor t = Tensor::zeros({1});
    t.host_f32()[0] = static_cast<float>(x);
    world.all_reduce(t, op);
    return static_cast<double>(t.host_f32()[0]) / (op == comm::ReduceOp::Sum ? world.size() : 1);
  };
  work();  // warm-up: caches, oneDNN primitives, MPI connections
  world.barrier();
  Timer once;
  work();
  const double slowest = over_ranks(once.seconds(), comm::ReduceOp::Max);
  const int runs = static_cast<int>(std::clamp(budget / std::max(slowest, 1e-9), 2.0, 1000.0));
  double fastest = slowest;
  for (int i = 0; i < runs; ++i) {
    world.barrier();
    Timer timer;
    work();
    fastest = std::min(fastest, timer.seconds());
  }
  return over_ranks(fastest, comm::ReduceOp::Sum);
}

void fill(Tensor& t, float value) { std::fill(t.host_f32(), t.host_f32() + t.numel(), value); }

DType gemm_input_type(Precision p) {
  return p == Precision::Bf16 ? DType::BF16 : p == Precision::Fp16 ? DType::F16 : DType::F32;
}

// Forward C = A B^T, input gradient dA = dC B, weight gradient dB = dC^T A: the three products of a linear
// layer with m tokens, n outputs and k inputs, with the run's GEMM input type (16-bit under --bf16/--fp16).
// As in training, each product reads a weight and accumulates into a weight gradient that other layers'
// work has pushed out of the caches: the measurement cycles through copies of them that together exceed
// the caches (kColdBytes), which is what a token slice's few rows cannot hide behind their FLOPs.
constexpr double kColdBytes = 64.0 * (1 << 20);
int cold_copies(const GemmShape& s) {
  return static_cast<int>(std::clamp(kColdBytes / (2 * 4.0 * static_cast<double>(s.n * s.k)), 1.0, 64.0));
}

double linear_gemm_rate(comm::ProcessGroup& world, const GemmShape& s, DType input_type, double budget) {
  Tensor a = Tensor::empty({s.m, s.k}), c = Tensor::empty({s.m, s.n}), da = Tensor::empty({s.m, s.k});
  fill(a, 0.01f);
  fill(c, 0.03f);
  const int copies = cold_copies(s);
  std::vector<Tensor> weights, weight_grads;
  for (int i = 0; i < copies; ++i) {
    weights.push_back(Tensor::empty({s.n, s.k}));
    weight_grads.push_back(Tensor::zeros({s.n, s.k}));
    fill(weights.back(), 0.02f);
  }
  using kernels::Trans;
  auto gemm = [input_type](kernels::GemmArgs g) {
    g.input_type = input_type;
    kernels::gemm(g);
  };
  int next = 0;
  const double seconds = time_per_run(world, budget, [&] {
    const Tensor& b = weights[next];
    const Tensor& db = weight_grads[next];
    next = (next + 1) % copies;
    gemm({Trans::N, Trans::T, s.m, s.n, s.k, a.host_f32(), s.k, b.host_f32(), s.k, c.host_f32(), s.n});
    gemm({Trans::N, Trans::N, s.m, s.k, s.n, c.host_f32(), s.n, b.host_f32(), s.k, da.host_f32(), s.k});
    kernels::GemmArgs accumulate{Trans::T, Trans::N, s.n, s.k, s.m, c.host_f32(), s.n, a.host_f32(), s.k, db.host_f32(), s.k};
    accumulate.beta = 1.0f;  // the weight gradient accumulates, as over micro-batches and slices
    gemm(accumulate);
  });
  return 3 * 2.0 * static_cast<double>(s.m) * s.n * s.k / seconds;
}

// The rate that makes the time model's attention (forward F / rate, backward 2.5 F / rate) match the
// measured forward + backward of the flash-attention kernel.
double attention_rate(comm::ProcessGroup& world, const model::ModelConfig& c, const Layout& l, double budget) {
  kernels::AttentionShape shape;
  shape.seq = c.seq_length / l.cp;  // under context parallelism a ring step's seq / cp queries and keys
  shape.batch = l.micro_batch_size;
  shape.heads = c.num_attention_heads / l.tp;
  shape.kv_heads = c.num_query_groups / l.tp;
  shape.head_dim = c.kv_channels;
  const int64_t q_elems = shape.seq * shape.batch * shape.heads * shape.head_dim;
  const int64_t kv_elems = shape.seq * shape.batch * shape.kv_heads * shape.head_dim;
  Tensor q = Tensor::empty({q_elems}), k = Tensor::empty({kv_elems}), v = Tensor::empty({kv_elems});
  Tensor out = Tensor::empty({q_elems}), dout = Tensor::empty({q_elems}), dq = Tensor::empty({q_elems});
  Tensor dk = Tensor::empty({kv_elems}), dv = Tensor::empty({kv_elems});
  Tensor lse = Tensor::empty({shape.batch * shape.heads * shape.seq});
  for (Tensor* t : {&q, &k, &v, &dout}) fill(*t, 0.1f);
  kernels::AttentionDropout dropout;
  dropout.p = c.attention_dropout;
  dropout.seed = 1;
  dropout.total_heads = shape.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const double seconds = time_per_run(world, budget, [&] {
    kernels::attention_forward(q, k, v, out, lse, Tensor(), shape, scale, dropout);
    kernels::attention_backward(q, k, v, out, lse, dout, dq, dk, dv, Tensor(), shape, scale, dropout);
  });
  const double forward_flops = 4.0 * shape.batch * shape.heads * static_cast<double>(shape.seq) * shape.seq * shape.head_dim;
  return 3.5 * forward_flops / seconds;
}

// A streaming triad over arrays much larger than the caches: 12 bytes per element.
double memory_bandwidth(comm::ProcessGroup& world, double budget) {
  const int64_t n = 16 << 20;
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  const double seconds = time_per_run(world, budget, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + 0.5f * c[i];
  });
  return 12.0 * n / seconds;
}

// The floor every kernel pays however little it does (DeviceSpec::kernel_seconds): a call of a
// 64-element add, the dispatch and checks a layer's small kernels repeat.
double kernel_floor(comm::ProcessGroup& world, double budget) {
  constexpr int kCalls = 200;
  Tensor a = Tensor::zeros({64}), b = Tensor::zeros({64});
  return time_per_run(world, budget, [&] {
           for (int i = 0; i < kCalls; ++i) kernels::add_into(a, b);
         }) /
         kCalls;
}

// Row counts at which each of the model's GEMM shapes is also measured (when it has more rows).
constexpr long long kShortGemmRows[] = {8, 32, 128};

}  // namespace

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      std::string name = line.substr(line.find(':') + 1);
      name.erase(0, name.find_first_not_of(" \t"));
      return name;
    }
  return "unknown cpu";
}

nlohmann::json calibration_key(const model::ModelConfig& c, const Layout& l, int ranks) {
  nlohmann::json key = {{"num_layers", c.num_layers},
                        {"hidden_size", c.hidden_size},
                        {"ffn_hidden_size", c.ffn_hidden_size},
                        {"num_attention_heads", c.num_attention_heads},
                        {"num_query_groups", c.num_query_groups},
                        {"kv_channels", c.kv_channels},
                        {"seq_length", c.seq_length},
                        {"padded_vocab_size", c.padded_vocab_size},
                        {"swiglu", c.swiglu},
                        {"tensor_model_parallel_size", l.tp},
                        {"micro_batch_size", l.micro_batch_size},
                        {"precision", to_string(l.precision)},
                        {"cpu", cpu_model_name()},
                        {"threads_per_rank", omp_get_max_threads()},
                        {"ranks", ranks}};
  if (l.cp > 1) key["context_parallel_size"] = l.cp;  // (absent at cp 1: earlier files stay valid)
  return key;
}

std::vector<std::string> calibration_mismatches(const nlohmann::json& have, const nlohmann::json& want) {
  std::vector<std::string> out;
  for (const auto& [field, value] : want.items()) {
    if (!have.contains(field)) out.push_back(str_cat(field, ": not recorded (calibrated) vs ", value.dump(), " (this run)"));
    else if (have.at(field) != value)
      out.push_back(str_cat(field, ": ", have.at(field).dump(), " (calibrated) vs ", value.dump(), " (this run)"));
  }
  return out;
}

std::vector<GemmShape> model_gemm_shapes(const model::ModelConfig& c, const Layout& l) {
  const long long tokens = c.seq_length / l.cp * l.micro_batch_size, h = c.hidden_size, t = l.tp;
  const long long fc1_out = c.swiglu ? 2 * c.ffn_hidden_size : c.ffn_hidden_size;
  return {{tokens, c.qkv_size() / t, h},
          {tokens, h, c.num_attention_heads * c.kv_channels / t},
          {tokens, fc1_out / t, h},
          {tokens, h, c.ffn_hidden_size / t},
          {tokens, c.padded_vocab_size / t, h}};
}

DeviceSpec calibrate_device(const model::ModelConfig& c, const Layout& l, comm::ProcessGroup& world,
                            double seconds_per_measurement) {
  DeviceSpec d = find_device("cpu");
  d.name = "cpu (calibrated)";
  d.reserved_bytes = resident_bytes();
  d.gemm_efficiency = 1;  // the rates below are what the GEMMs reach, not a fraction of a datasheet peak
  d.peak_flops = 0;
  for (const GemmShape& s : model_gemm_shapes(c, l)) {
    const double rate = linear_gemm_rate(world, s, gemm_input_type(l.precision), seconds_per_measurement);
    d.gemm_rates.push_back({s.m, s.n, s.k, rate});
    d.peak_flops = std::max(d.peak_flops, rate);
    // The same product on a token slice's few rows, where a GEMM reaches far less of its rate (the time
    // model interpolates between these for --pipeline-token-slices).
    for (long long rows : kShortGemmRows)
      if (rows < s.m) {
        const GemmShape short_shape{rows, s.n, s.k};
        d.gemm_rates.push_back(
            {rows, s.n, s.k, linear_gemm_rate(world, short_shape, gemm_input_type(l.precision), seconds_per_measurement / 4)});
      }
  }
  d.attention_flops_per_second = attention_rate(world, c, l, seconds_per_measurement);
  // What a process holds besides the model: the runtime, oneDNN's kernels and the thread pools, loaded
  // by now; less the largest measurement buffers (the heap keeps them, as it keeps training's).
  double largest_buffers = 0;
  for (const GemmShape& s : model_gemm_shapes(c, l))
    largest_buffers = std::max(largest_buffers, 4.0 * (2 * s.m * s.k + 2 * cold_copies(s) * s.n * s.k + s.m * s.n));
  d.reserved_bytes = std::max(d.reserved_bytes, resident_bytes() - largest_buffers);
  d.memory_bandwidth = memory_bandwidth(world, seconds_per_measurement);
  d.kernel_seconds = kernel_floor(world, seconds_per_measurement);
  // All ranks of this job share one machine: its "node" is the job.
  d.devices_per_node = world.size();
  if (world.size() > 1) {
    const double n = world.size(), factor = 2 * (n - 1) / n;
    // Bandwidth from two large messages; latency from a one-float message, whose time is all latency (a
    // 256 KiB one's is mostly bandwidth, and fitting both from it gave 0 here).
    const int64_t tiny = 1, small = 64 << 10, large = 8 << 20;  // floats
    Tensor a = Tensor::zeros({small}), b = Tensor::zeros({large}), one = Tensor::zeros({tiny});
    const double t_small = time_per_run(world, seconds_per_measurement, [&] { world.all_reduce(a); });
    const double t_large = time_per_run(world, seconds_per_measurement, [&] { world.all_reduce(b); });
    const double t_tiny = time_per_run(world, seconds_per_measurement, [&] { world.all_reduce(one); });
    const double bytes_small = 4.0 * small, bytes_large = 4.0 * large;
    d.intra_node_bandwidth = factor * (bytes_large - bytes_small) / std::max(t_large - t_small, 1e-9);
    d.intra_node_latency = t_tiny / (2 * (n - 1));
    d.inter_node_bandwidth = d.intra_node_bandwidth;
    d.inter_node_latency = d.intra_node_latency;
  }
  return d;
}

}  // namespace tessera::plan
