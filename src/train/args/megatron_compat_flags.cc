#include "train/args/megatron_compat_flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"

namespace tessera::train {
namespace {

// A flag without a value, and what Tessera does in its place.
struct Switch {
  const char* name;
  const char* instead;
};

const Switch kSwitches[] = {
    {"--use-flash-attn", "attention is always Tessera's own tiled kernel, never an s x s matrix"},
    {"--use-mcore-models", "the model is Tessera's own (Megatron-Core's layout)"},
    {"--no-persist-layer-norm", "LayerNorm is Tessera's kernel"},
    {"--attention-softmax-in-fp32", "the softmax is always computed in fp32"},
    {"--apply-query-key-layer-scaling", "the softmax is always computed in fp32 (the scaling cancels out)"},
    {"--no-masked-softmax-fusion", "Tessera's kernels, fused or not, compute the same values"},
    {"--no-bias-gelu-fusion", "Tessera's kernels, fused or not, compute the same values"},
    {"--no-bias-swiglu-fusion", "Tessera's kernels, fused or not, compute the same values"},
    {"--no-bias-dropout-fusion", "Tessera's kernels, fused or not, compute the same values"},
    {"--no-rope-fusion", "Tessera's kernels, fused or not, compute the same values"},
    {"--no-gradient-accumulation-fusion", "gradients accumulate in their fp32 buffer either way"},
    {"--no-async-tensor-model-parallel-allreduce", "Tessera's tensor-parallel collectives"},
    {"--log-throughput", "the log line always has the throughput"},
    {"--log-validation-ppl-to-tensorboard", "TensorBoard always gets the validation perplexity"},
    {"--log-timers-to-tensorboard", "the timers are in the log, not in TensorBoard"},
    {"--no-save-rng", "the random state is the seed, which the checkpoint's index records"},
    {"--cross-entropy-loss-fusion", "the loss is Tessera's kernel, fused or not, with the same values"},
    {"--moe-permute-fusion", "the token permutation is Tessera's kernel, fused or not, with the same values"},
    {"--use-nccl-ub", "NCCL user buffers change where collectives' buffers live, not what they compute"},
    {"--manual-gc", "there is no Python garbage collector to run by hand"},
    {"--no-create-attention-mask-in-dataloader", "the attention kernel applies the causal and document masks itself; "
                                                 "the data loader never builds a mask"},
    {"--no-mmap-bin-files", "how the .bin files are read does not change the samples"},
    {"--init-model-with-meta-device", "parameters are initialised once, directly, with the same values"},
    {"--auto-detect-ckpt-format", "--load reads Tessera's checkpoints, whose format it detects itself"},
    {"--log-memory-to-tensorboard", "the memory report is in the log at start-up"},
    {"--log-num-zeros-in-grad", "the count of zero gradients is not reported"},
    {"--profile", "no CUDA profiler range is opened (Nsight Systems' --capture-range); the log has Tessera's timers"},
    {"--enable-experimental", "Tessera's features need no experimental switch"},
    // train/step_context.h: every micro-batch's gradient is scaled by 1 / the global batch's loss tokens.
    {"--calculate-per-token-loss", "the loss is always the mean over the global batch's loss tokens (over every "
                                   "micro-batch and data-parallel rank), which is what this flag selects in Megatron"},
};

// A flag with a value, the values Megatron accepts (empty: a count >= 0; {"*"}: any text), and what Tessera does; where a
// value means something of its own here, `meaning` says what; values Megatron removed are refused with why.
struct Choice {
  const char* name;
  std::vector<std::string> values;
  const char* instead;
  std::vector<std::pair<std::string, std::string>> meaning = {};
  std::vector<std::pair<std::string, std::string>> removed = {};
};

const char* find_value(const std::vector<std::pair<std::string, std::string>>& list, const std::string& v) {
  for (const auto& [value, text] : list)
    if (value == v) return text.c_str();
  return nullptr;
}

const Choice kChoices[] = {
    {"--transformer-impl", {"local", "transformer_engine"}, "the layers are Tessera's own"},
    {"--distributed-backend", {"nccl", "gloo"}, "ranks talk through MPI (NCCL is the GPU path's)"},
    // Megatron-LM's formats now (docs/checkpoints.md#megatrons-checkpoints): Tessera writes its own format
    // whichever is given, and reads Megatron's through tessera convert.
    {"--ckpt-format", {"torch", "torch_dist", "torch_dcp", "fsdp_dtensor"},
     "checkpoints are Tessera's: Megatron's directory layout, safetensors files, resharded on load",
     {{"torch", "checkpoints are Tessera's (Megatron's directory layout, safetensors files, resharded on load); "
                "Megatron-LM's torch checkpoints (its legacy format) convert with tessera convert --loader "
                "megatron, and back with --saver megatron"},
      {"torch_dist", "checkpoints are Tessera's (Megatron's directory layout, safetensors files, resharded on "
                     "load); Megatron-LM's torch_dist checkpoints convert with tessera convert --loader megatron"},
      {"torch_dcp", "checkpoints are Tessera's (Megatron's directory layout, safetensors files, resharded on "
                    "load); Megatron-LM's torch_dcp checkpoints (PyTorch FSDP2's) are not read"},
      {"fsdp_dtensor", "checkpoints are Tessera's (Megatron's directory layout, safetensors files, resharded on "
                       "load); Megatron-LM's fsdp_dtensor checkpoints (Megatron-FSDP's) are not read"}},
     {{"zarr", "Megatron-LM removed the zarr format (January 2026); its values now are torch, torch_dist, torch_dcp "
               "and fsdp_dtensor (Tessera writes its own format whichever is given)"}}},
    {"--num-workers", {}, "samples are read on the training thread"},
    {"--non-persistent-local-ckpt-algo", {"fully_parallel", "atomic"},
     "each rank writes all its own local checkpoint, completed by a rename once every rank's files are written"},
    {"--timing-log-level", {"0", "1", "2"}, "the log has Tessera's timers"},
    {"--attention-backend", {"auto", "flash", "fused", "unfused", "local"},
     "attention is always Tessera's own tiled kernel (the backends compute the same values)"},
    {"--empty-unused-memory-level", {"0", "1", "2"}, "Tessera's allocator keeps or frees its cached blocks itself"},
    {"--logging-level", {}, "the log is Tessera's"},
    {"--manual-gc-interval", {}, "there is no Python garbage collector to run by hand"},
    {"--profile-step-start", {}, "no CUDA profiler range is opened; the log has Tessera's timers"},
    {"--profile-step-end", {}, "no CUDA profiler range is opened; the log has Tessera's timers"},
    // The router's gating is fp32 already (model/moe_router.cc); fp64 would change the numbers.
    {"--moe-router-dtype", {"fp32"}, "the router's gating is always computed in fp32",
     {}, {{"fp64", "Tessera computes the router's gating in fp32 (Megatron's --moe-router-dtype fp32); fp64 is not "
                   "built"}}},
    // Weights & Biases: any name; the metrics go to the log, metrics.jsonl and --tensorboard-dir.
    {"--wandb-project", {"*"}, "nothing is sent to Weights & Biases (the metrics are in the log, --log-dir's "
                               "metrics.jsonl and --tensorboard-dir)"},
    {"--wandb-exp-name", {"*"}, "nothing is sent to Weights & Biases"},
    {"--wandb-save-dir", {"*"}, "nothing is sent to Weights & Biases"},
    {"--wandb-entity", {"*"}, "nothing is sent to Weights & Biases"},
    // Megatron's TikTokenizer reads it; with any other tokenizer (its example scripts' NullTokenizer) it
    // changes nothing, and Tessera has no TikTokenizer.
    {"--tiktoken-pattern", {"v1", "v2"}, "only Megatron's TikTokenizer reads it, which Tessera does not have"},
    // How Megatron's dist-checkpointing loader treats keys the model and the checkpoint do not share;
    // Tessera's checkpoints hold exactly the model's tensors and a missing one is an error.
    {"--dist-ckpt-strictness",
     {"assume_ok_unexpected", "log_unexpected", "log_all", "raise_unexpected", "raise_all", "return_unexpected",
      "return_all", "ignore_all"},
     "loading a checkpoint checks every tensor of the model (a missing one is an error)"},
};

// Flags with several values (argparse's nargs='+'): the values Megatron accepts (empty: counts >= 0), those
// that are Tessera's behaviour already (empty: all of them), and what Tessera does.
struct ListChoice {
  const char* name;
  std::vector<std::string> values, here;
  const char* instead;
};

const ListChoice kLists[] = {
    {"--profile-ranks", {}, {}, "no CUDA profiler range is opened; the log has Tessera's timers"},
    // Tessera's selective recomputation is Megatron's default module list, the core attention.
    {"--recompute-modules",
     {"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts"},
     {"core_attn"},
     "--recompute-granularity selective recomputes the core attention (Megatron's core_attn); recomputing other "
     "modules is not built"},
};

void add_megatron_compat_list_flags(CLI::App& group, std::vector<std::string>& given);

}  // namespace

void add_megatron_compat_flags(CLI::App& group, std::vector<std::string>& given) {
  for (const Switch& s : kSwitches) {
    const std::string name = s.name, instead = s.instead;
    group.add_flag_callback(name, [&given, name, instead] { given.push_back(name + " (" + instead + ")"); },
                            "Megatron's; accepted, no effect here: " + instead);
  }
  for (const Choice& c : kChoices) {
    const std::string name = c.name, instead = c.instead;
    const std::vector<std::string> values = c.values;
    const auto meaning = c.meaning, removed = c.removed;
    group
        .add_option_function<std::string>(
            name,
            [&given, name, instead, values, meaning, removed](const std::string& v) {
              if (const char* why = find_value(removed, v)) throw Error(str_cat(name, "=", v, ": ", why));
              const bool any_text = values.size() == 1 && values[0] == "*";
              bool ok = values.empty() ? !v.empty() && v.find_first_not_of("0123456789") == std::string::npos
                                       : any_text ? !v.empty()
                                                  : std::find(values.begin(), values.end(), v) != values.end();
              std::string rule = "must be a count >= 0";
              if (any_text) {
                rule = "must not be empty";
              } else if (!values.empty()) {
                rule = "must be one of";
                for (const std::string& x : values) rule += " " + x;
              }
              TESSERA_CHECK(ok, name, "=", v, ": ", rule, " (Megatron's; accepted, no effect here)");
              const char* means = find_value(meaning, v);
              given.push_back(name + " " + v + " (" + (means ? means : instead) + ")");
            },
            "Megatron's; accepted, no effect here: " + instead)
        ->type_name(values.empty() ? "INT" : "TEXT");
  }
  add_megatron_compat_list_flags(group, given);
}

namespace {

void add_megatron_compat_list_flags(CLI::App& group, std::vector<std::string>& given) {
  for (const ListChoice& c : kLists) {
    const std::string name = c.name, instead = c.instead;
    const std::vector<std::string> values = c.values, here = c.here;
    group
        .add_option_function<std::vector<std::string>>(
            name,
            [&given, name, instead, values, here](const std::vector<std::string>& list) {
              std::string joined;
              for (const std::string& v : list) {
                const bool known = values.empty()
                                       ? !v.empty() && v.find_first_not_of("0123456789") == std::string::npos
                                       : std::find(values.begin(), values.end(), v) != values.end();
                std::string rule = "must be counts >= 0";
                if (!values.empty()) {
                  rule = "must be some of";
                  for (const std::string& x : values) rule += " " + x;
                }
                TESSERA_CHECK(known, name, "=", v, ": ", rule, " (Megatron's)");
                TESSERA_CHECK(here.empty() || std::find(here.begin(), here.end(), v) != here.end(), name, "=", v,
                              ": ", instead);
                joined += (joined.empty() ? "" : " ") + v;
              }
              given.push_back(name + " " + joined + " (" + instead + ")");
            },
            "Megatron's; accepted, no effect here: " + instead)
        ->expected(1, -1)
        ->type_name(values.empty() ? "INT ..." : "TEXT ...");
  }
}

}  // namespace

std::string megatron_compat_note(const std::vector<std::string>& given) {
  if (given.empty()) return "";
  std::string note = " > Megatron flags accepted with no effect here:";
  for (const std::string& g : given) note += "\n     " + g;
  return note;
}

}  // namespace tessera::train
