// Encode throughput of Tessera's GPT-2 tokenizer on one thread; bench/tokenizer_bench.sh runs it beside
// tiktoken. Usage: tokenizer_bench VOCAB_JSON MERGES_TXT TEXT_FILE [RUNS]
// Prints one line of key=value pairs: bytes, tokens, first (the run that fills the word cache), best.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "core/check.h"
#include "data/gpt2_bpe_tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s VOCAB_JSON MERGES_TXT TEXT_FILE [RUNS]\n", argv[0]);
    return 2;
  }
  try {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const tessera::data::Gpt2BpeTokenizer tok(argv[1], argv[2]);
    const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::ifstream in(argv[3], std::ios::binary);
    TESSERA_CHECK(in, "cannot read ", argv[3]);
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    const int runs = argc > 4 ? std::stoi(argv[4]) : 3;

    double first = 0, best = 1e30;
    size_t tokens = 0;
    for (int r = 0; r < runs; ++r) {
      const auto start = Clock::now();
      tokens = tok.encode(text).size();
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      if (r == 0) first = s;
      best = std::min(best, s);
    }
    std::printf("impl=tessera bytes=%zu tokens=%zu load_s=%.3f first_mbps=%.2f best_mbps=%.2f\n", text.size(),
                tokens, load_s, text.size() / first / 1e6, text.size() / best / 1e6);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
}
