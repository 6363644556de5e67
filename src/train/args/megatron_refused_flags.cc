#include "train/args/megatron_refused_flags.h"

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "core/check.h"

namespace tessera::train {
namespace {

// A refused flag: how many values it takes (0: a switch; -1: one or more, argparse's nargs='+'), so that
// the parser reads its values as its own, and why Tessera refuses it.
struct Refused {
  const char* name;
  int values;
  const char* why;
};

constexpr const char* kFp8 = "FP8 training is not built (Tessera trains in fp32, --bf16 or --fp16)";
constexpr const char* kFsdp =
    "Megatron-FSDP is not built; --use-distributed-optimizer shards the optimizer state over the data-parallel "
    "ranks (Megatron's ZeRO-1)";

const Refused kRefused[] = {
    {"--fp8-format", 1, kFp8},
    {"--fp8-recipe", 1, kFp8},
    {"--fp8-amax-history-len", 1, kFp8},
    {"--fp8-amax-compute-algo", 1, kFp8},
    {"--fp8-param-gather", 0, kFp8},
    {"--use-megatron-fsdp", 0, kFsdp},
    {"--data-parallel-sharding-strategy", 1, kFsdp},
    {"--fsdp-double-buffer", 0, kFsdp},
    {"--megatron-fsdp-grad-comm-dtype", 1, kFsdp},
    {"--megatron-fsdp-main-grads-dtype", 1, kFsdp},
    {"--decoupled-lr", 1,
     "a separate learning rate for the embedding and the output layer is not built (every parameter follows --lr)"},
    {"--decoupled-min-lr", 1,
     "a separate learning rate for the embedding and the output layer is not built (every parameter follows "
     "--min-lr)"},
    {"--grad-reduce-in-bf16", 0,
     "gradients are accumulated and reduced in fp32 (--accumulate-allreduce-grads-in-fp32 is always so here); "
     "reducing them in bf16 is not built"},
    {"--apply-layernorm-1p", 0, "zero-centred norm weights (1 + gamma) are not built"},
    {"--moe-router-force-load-balancing", 0,
     "replacing the router's choice by a balanced one (a benchmarking switch) is not built"},
    {"--moe-flex-dispatcher-backend", 1,
     "the flex token dispatcher (DeepEP, HybridEP) is not built: --moe-token-dispatcher-type alltoall or allgather"},
    {"--hierarchical-context-parallel-sizes", -1,
     "hierarchical context parallelism (Megatron's --cp-comm-type a2a+p2p) is not built; --context-parallel-size "
     "runs ring attention"},
};

}  // namespace

void add_megatron_refused_flags(CLI::App& group) {
  for (const Refused& r : kRefused) {
    const std::string name = r.name, why = r.why;
    const std::string help = "Megatron's; refused: " + why;
    if (r.values == 0) {
      group.add_flag_callback(name, [name, why] { throw Error(str_cat(name, ": ", why)); }, help);
      continue;
    }
    group
        .add_option_function<std::vector<std::string>>(
            name,
            [name, why](const std::vector<std::string>& v) {
              std::string values;
              for (const std::string& x : v) values += (values.empty() ? "" : " ") + x;
              throw Error(str_cat(name, "=", values, ": ", why));
            },
            help)
        ->expected(1, r.values == 1 ? 1 : -1);
  }
}

}  // namespace tessera::train
