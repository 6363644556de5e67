// The rules of --context-parallel-size (Megatron-Core's context parallelism: parallel/context_parallel.h,
// model/ring_attention.h). Issue 37 runs ring attention on dense GPT layers with data, tensor,
// sequence and pipeline (1F1B and interleaved) parallelism, document masks, and checkpoints across cp;
// the layouts and features whose composition with it is not built (or not tested) yet are refused,
// naming the flag.
#include "train/argument_rules.h"
#include "train/arguments.h"

namespace tessera::train {

using rules::require;

void finalize_context_parallel(TrainArguments& a) {
  const int64_t cp = a.context_parallel_size;
  if (cp == 1) return;
  const char* flag = "--context-parallel-size";
  require(a.model.seq_length % (2 * cp) == 0, "--seq-length", a.model.seq_length,
          str_cat("must be divisible by 2 x --context-parallel-size=", cp,
                  " (the sequence is cut into 2 x cp chunks, rank i holding chunks i and 2 x cp - 1 - i)"));
  auto not_yet = [&](bool ok, const std::string& what) {
    require(ok, flag, cp, str_cat("cannot be combined with ", what, " yet (issue 37)"));
  };
  not_yet(a.model.family == "gpt", str_cat("--model-family ", a.model.family, " (ring attention needs a causal GPT)"));
  // Sequence parallelism splits a rank's two chunks (seq / cp positions) over the tensor group.
  require(!a.sequence_parallel || (a.model.seq_length / cp) % a.tensor_model_parallel_size == 0, "--seq-length",
          a.model.seq_length,
          str_cat("divided by --context-parallel-size=", cp, " (", a.model.seq_length / cp,
                  " positions per rank) must be divisible by --tensor-model-parallel-size=",
                  a.tensor_model_parallel_size, " with --sequence-parallel"));
  not_yet(!a.model.moe.enabled(), "mixture-of-experts layers (--num-experts)");
  not_yet(a.token_slices.empty(), "--pipeline-token-slices");
  not_yet(!a.kd, "--kd");
  // The distributed optimizer reduce-scatters the dense gradients over data x context as the all-reduce
  // sums them; --bf16 and --fp16 run the ring on 16-bit inputs with the log-sum-exp merge in fp32, and
  // fp16's overflow check reads gradients already reduced over data x context, so every rank skips alike.
}

}  // namespace tessera::train
