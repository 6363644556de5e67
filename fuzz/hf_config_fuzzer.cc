// libFuzzer target: Hugging Face config.json as `tessera convert --loader hf` reads it
// (ckpt::parse_hf_config), on arbitrary text. Any text must give a configuration the conversion can
// trust (positive sizes, heads divisible by the query groups, a parameter count without overflow) or a
// tessera::Error; a crash, a sanitizer report or another exception is a bug. Built and run by
// scripts/fuzz.sh.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ckpt/hf_config.h"
#include "core/check.h"

namespace {
void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "hf_config_fuzzer: invariant broken: %s\n", what);
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const tessera::model::ModelConfig c =
        tessera::ckpt::parse_hf_config(std::string(reinterpret_cast<const char*>(data), size), "config.json").config;
    require(c.num_layers >= 1 && c.hidden_size >= 1 && c.num_attention_heads >= 1 && c.num_query_groups >= 1 &&
                c.kv_channels >= 1 && c.ffn_hidden_size >= 1 && c.max_position_embeddings >= 1 &&
                c.vocab_size >= 1 && c.padded_vocab_size >= c.vocab_size,
            "every size is positive");
    require(c.num_attention_heads % c.num_query_groups == 0, "query groups divide the heads");
    // Overflow here is a sanitizer report (signed overflow is undefined).
    require(c.parameter_count() > 0 && c.qkv_size() > 0, "the parameter count is positive");
  } catch (const tessera::Error&) {
  }
  return 0;
}
