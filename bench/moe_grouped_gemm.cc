// A rank's local experts, forward and backward, one GEMM per expert (model::Mlp each, as MoeLayer runs
// them by default) against --moe-grouped-gemm's batched products on padded rows (model::GroupedMlp),
// on the same parameters, rows and gradients. GPT-2-style experts (GELU, biases), fp32.
//
// The rows of each expert follow a fixed mild imbalance, expert e's share proportional to
// 1 + 0.5 sin(e) (bench/expert_counts.h), or with --padded every expert has rows / experts
// (--moe-pad-expert-input-to-capacity). Per variant: milliseconds of forward + backward (median of
// --reps, the two variants interleaved), and GFLOP/s counting the routed rows' products only
// (12 x rows x hidden x ffn: two GEMMs forward, four backward), so padding shows as lost throughput.
//
// Usage: bench_moe_grouped_gemm [--hidden 512] [--ffn 2048] [--experts 8] [--rows 8192] [--reps 7] [--padded]
// Last line (machine-readable, for bench/moe_grouped_gemm.sh):
//   RESULT per_expert_ms=<> grouped_ms=<> gflops_per_expert=<> gflops_grouped=<> counts=<c0,c1,...>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "expert_counts.h"
#include "core/philox.h"
#include "core/timer.h"
#include "kernels/tensor_ops.h"
#include "model/grouped_mlp.h"
#include "model/mlp.h"

namespace {

using namespace tessera;

const char* arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

bool flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

Tensor random_rows(int64_t rows, int64_t h, uint64_t seed) {
  Tensor t = Tensor::empty({rows, h});
  PhiloxStream s(seed, 0);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = s.uniform(i) * 2.0f - 1.0f;
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t hidden = std::atoll(arg(argc, argv, "--hidden", "512"));
  const int64_t ffn = std::atoll(arg(argc, argv, "--ffn", "2048"));
  const int experts = std::atoi(arg(argc, argv, "--experts", "8"));
  const int64_t rows = std::atoll(arg(argc, argv, "--rows", "8192"));
  const int reps = std::max(1, std::atoi(arg(argc, argv, "--reps", "7")));
  const bool padded = flag(argc, argv, "--padded");
  if (experts < 1 || hidden < 1 || ffn < 1 || rows < 1 || (padded && rows % experts != 0)) {
    std::fprintf(stderr, "bench_moe_grouped_gemm: sizes must be positive%s\n",
                 padded ? ", and --rows must divide by --experts under --padded" : "");
    return 2;
  }
  const std::vector<int64_t> counts =
      padded ? std::vector<int64_t>(experts, rows / experts) : imbalanced_expert_counts(rows, experts, 0);

  model::ModelConfig c;
  c.hidden_size = hidden;
  c.ffn_hidden_size = ffn;
  c.init_method_std = 0.02f;
  c.add_bias_linear = !flag(argc, argv, "--no-bias");
  model::ParameterSet params;
  std::vector<std::unique_ptr<model::Mlp>> mlps;
  std::vector<const model::Mlp*> local;
  for (int e = 0; e < experts; ++e) {
    mlps.push_back(std::make_unique<model::Mlp>(c, "experts.local_experts." + std::to_string(e) + ".", params,
                                                parallel::TensorParallelContext::single_process(),
                                                model::MlpOptions{ffn, false}));
    local.push_back(mlps.back().get());
  }
  const model::GroupedMlp grouped(c, local);
  params.allocate(1);
  const Tensor x = random_rows(rows, hidden, 2), dy = random_rows(rows, hidden, 3);
  model::ForwardContext ctx;
  const Tensor positions;
  const model::SublayerContext sc{ctx, positions};

  // One MoE layer's expert work, as MoeLayer does it without and with --moe-grouped-gemm.
  auto per_expert = [&] {
    Tensor y = Tensor::empty({rows, hidden}), dx = Tensor::empty({rows, hidden});
    int64_t at = 0;
    for (int e = 0; e < experts; at += counts[e], ++e) {
      auto rec = mlps[e]->make_record();
      kernels::copy(y.narrow(at, counts[e]), mlps[e]->forward(x.narrow(at, counts[e]), false, sc, *rec));
      kernels::copy(dx.narrow(at, counts[e]),
                    mlps[e]->backward(dy.narrow(at, counts[e]), x.narrow(at, counts[e]), false, sc, *rec, false));
    }
  };
  auto batched = [&] {
    auto rec = grouped.make_record();
    Tensor y = grouped.forward(x, counts, false, *rec);
    Tensor dx = grouped.backward(dy, x, counts, false, *rec, false);
  };
  auto time = [](const std::function<void()>& f) {
    Timer t;
    f();
    return t.seconds() * 1e3;
  };
  per_expert();  // oneDNN primitives are made on first use
  batched();
  std::vector<double> a, b;
  for (int r = 0; r < reps; ++r) {
    a.push_back(time(per_expert));
    b.push_back(time(batched));
  }
  const double ms_a = median(a), ms_b = median(b);
  const double gflop = 12.0 * static_cast<double>(rows) * hidden * ffn * 1e-9;
  std::string list;
  for (int64_t n : counts) {
    if (!list.empty()) list += ',';
    list += std::to_string(n);
  }
  const char* threads = std::getenv("OMP_NUM_THREADS");
  std::printf("# bench_moe_grouped_gemm: %d experts, hidden %lld, ffn %lld, %lld rows (max %lld per expert), "
              "OMP_NUM_THREADS=%s, median of %d\n",
              experts, static_cast<long long>(hidden), static_cast<long long>(ffn), static_cast<long long>(rows),
              static_cast<long long>(*std::max_element(counts.begin(), counts.end())), threads ? threads : "unset",
              reps);
  std::printf("RESULT per_expert_ms=%.3f grouped_ms=%.3f gflops_per_expert=%.2f gflops_grouped=%.2f counts=%s\n", ms_a,
              ms_b, gflop / ms_a * 1e3, gflop / ms_b * 1e3, list.c_str());
  return 0;
}
