// The cost of one continuous-batching decoding step (infer::BatchDecoder::step: the model's forward over
// one new token of every sequence, then the sampling) at 1, 8 and 32 sequences, on issue 40's serving
// shape: a 4-layer GPT, hidden 256, 8 heads, GPT-2's vocabulary (50257, padded to 50304), the server's
// cache blocks of 256 positions. Each sequence reads a 6-token prompt, then generates 32 tokens with
// top_k 20, as bench/serve_load.sh's requests do; only the 31 steps after the prompt's are timed.
// The batch sizes take turns round by round, so that a slower spell of a shared machine falls on all of
// them, and the ratios are medians of one process.
//
// Run: build/release/bench_decode_step [--rounds R] [--layers L] [--hidden H] [--packed 0|1] (0: oneDNN's
// matmul on the weights as stored, as before kernels/packed_linear.h). With TESSERA_PROFILE=1 it
// also prints, per batch size, where the timed steps' time went (kernels/profiler rows, ms per step).
// Last, the roofline of a step's products on this machine at this thread count (see weight_stream_gbs).
// A benchmark, not a test: generation's outputs are checked in infer/*_test.cc.
#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "core/profiler.h"
#include "core/testing.h"
#include "core/thread_policy.h"
#include "core/timer.h"
#include "fma_peak.h"
#include "infer/batch_decoder.h"
#include "kernels/cpu/packed_linear.h"
#include "model/model_factory.h"

using namespace tessera;

namespace {

constexpr int64_t kPrompt = 6, kTokens = 32, kBlockSize = 256;

model::ModelConfig serving_config(int64_t layers, int64_t hidden) {
  model::ModelConfig c;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_attention_heads = 8;
  c.num_query_groups = 8;
  c.kv_channels = hidden / 8;
  c.ffn_hidden_size = 4 * hidden;
  c.seq_length = 128;
  c.max_position_embeddings = 256;
  c.vocab_size = 50257;
  c.padded_vocab_size = 50304;
  c.hidden_dropout = 0;
  c.attention_dropout = 0;
  return c;
}

// One generation of `batch` sequences from start to end; the time of each step after the prompt's.
std::vector<double> run_batch(const infer::ModelRunner& runner, int64_t batch, uint64_t seed) {
  infer::BatchDecoder decoder(runner, batch, kBlockSize);
  auto options = std::make_shared<infer::GenerationOptions>();
  options->sampling.tokens_to_generate = kTokens;
  options->sampling.top_k = 20;
  options->sampling.random_seed = seed;
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<int32_t> prompt(kPrompt);
    for (int64_t t = 0; t < kPrompt; ++t) prompt[t] = static_cast<int32_t>((seed * 7919 + i * 131 + t * 17) % 50257);
    decoder.add({prompt, options, static_cast<uint64_t>(i)});
  }
  decoder.step();  // the prompts
  std::vector<double> seconds;
  while (decoder.active() > 0) {
    Timer t;
    decoder.step();
    seconds.push_back(t.seconds());
  }
  return seconds;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GB/s at which a one-row packed product streams an [out, in] weight from memory (median of 25 calls):
// the rate at which a step of one sequence reads its weights.
double weight_stream_gbs(int64_t out, int64_t in) {
  const std::vector<float> w = testing::random_vector(out * in, 1), x = testing::random_vector(in, 2);
  std::vector<float> packed((out + kernels::cpu::kPackedColumns - 1) / kernels::cpu::kPackedColumns *
                            kernels::cpu::kPackedColumns * in),
      y(out);
  kernels::cpu::pack_linear_weight(w.data(), packed.data(), out, in);
  std::vector<double> seconds;
  for (int c = 0; c < 28; ++c) {
    Timer t;
    kernels::cpu::packed_linear_forward(x.data(), packed.data(), nullptr, y.data(), 1, in, out);
    if (c >= 3) seconds.push_back(t.seconds());
  }
  return 4.0 * static_cast<double>(out * in) / median(seconds) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  settle_openmp_wait_policy(argv);  // as tessera serve does
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  int rounds = 10;
  int64_t layers = 4, hidden = 256;
  bool packed = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--packed")) packed = std::atoi(argv[i + 1]) != 0;
    else if (!std::strcmp(argv[i], "--layers")) layers = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--hidden")) hidden = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_decode_step [--rounds R] [--layers L] [--hidden H] [--packed 0|1]\n");
      return 2;
    }
  }
  const model::ModelConfig config = serving_config(layers, hidden);
  model::ParameterSet params;
  std::unique_ptr<model::LanguageModelChunk> model = model::build_model_chunk(config, params);
  params.allocate(1234, false);
  if (packed) params.keep_packed_weights();  // as a loaded model does (infer::LoadOptions::packed_weights)
  const std::unique_ptr<infer::ModelRunner> runner =
      infer::make_model_runner(*model, parallel::TensorParallelContext::single_process());

  const std::vector<int64_t> batches = {1, 8, 32};
  std::map<int64_t, std::vector<double>> steps;
  std::map<int64_t, std::string> profiles;
  for (int64_t b : batches) run_batch(*runner, b, 0);  // warm-up: first touches, oneDNN primitives
  for (int64_t b : batches) {  // profile each size alone (the table is process-wide)
    if (!profiler::enabled()) break;
    profiler::reset();
    for (int r = 0; r < rounds; ++r) run_batch(*runner, b, r + 1);
    profiles[b] = profiler::report();
  }
  for (int r = 0; r < rounds; ++r)
    for (int64_t b : batches) {
      const std::vector<double> s = run_batch(*runner, b, r + 1);
      steps[b].insert(steps[b].end(), s.begin(), s.end());
    }

  std::printf("decoding step: %lld layers, hidden %lld, vocabulary %lld, %d threads, %d rounds of %lld steps\n",
              static_cast<long long>(layers), static_cast<long long>(hidden),
              static_cast<long long>(config.padded_vocab_size), omp_get_max_threads(), rounds,
              static_cast<long long>(kTokens - 1));
  const double one = median(steps[1]);
  // The mean too: the server's closing line reports means (a loaded machine's slow steps weigh there).
  std::printf("%10s %12s %12s %12s %12s\n", "sequences", "median ms", "p90 ms", "x 1 sequence", "mean ms");
  for (int64_t b : batches) {
    std::vector<double> s = steps[b];
    std::sort(s.begin(), s.end());
    double sum = 0;
    for (double v : s) sum += v;
    std::printf("%10lld %12.3f %12.3f %12.2f %12.3f\n", static_cast<long long>(b), 1e3 * median(s),
                1e3 * s[s.size() * 9 / 10], median(s) / one, 1e3 * sum / static_cast<double>(s.size()));
  }

  // A step reads every weight of the products once (4 bytes each, at the stream rate B) and does 2 n
  // FLOP per weight for n sequences (at most the FMA peak F): its products take at least
  // max(4 / B, 2 n / F) per weight, so against a step of one at least max(1, n B / (2 F)). No kernel
  // beats this bound on this machine; the rest of a step (attention, sampling) only adds to it.
  const double stream = weight_stream_gbs(config.padded_vocab_size, hidden), peak = bench::fma_peak_gflops();
  std::printf("\nroofline of the products: weights streamed at %.1f GB/s (one-row product of the output layer),"
              " FMA peak %.1f GFLOP/s\n%10s %22s\n", stream, peak, "sequences", "products bound x 1");
  for (int64_t b : batches)
    std::printf("%10lld %22.2f\n", static_cast<long long>(b), std::max(1.0, b * stream / (2 * peak)));
  for (int64_t b : batches)
    if (profiles.count(b))
      std::printf("\nprofile, %lld sequences (%lld timed steps and %d prompt steps):\n%s",
                  static_cast<long long>(b), static_cast<long long>(rounds * (kTokens - 1)), rounds,
                  profiles[b].c_str());
  return 0;
}
