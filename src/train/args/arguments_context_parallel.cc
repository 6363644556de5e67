// The rules of --context-parallel-size (Megatron-Core's context parallelism: parallel/context_parallel.h,
// model/ring_attention.h). Issue 37 runs ring attention on GPT layers with data, tensor, sequence,
// pipeline (1F1B and interleaved) and expert parallelism (mixture-of-experts layers: each cp rank routes
// its own tokens, the expert-parallel group may span cp ranks, the load-balancing statistics are summed
// over cp), document masks, and checkpoints across cp; the layouts and features whose composition with
// it is not built (or not tested) yet are refused, naming the flag and why.
#include "train/args/argument_rules.h"
#include "train/args/arguments.h"

namespace tessera::train {

using rules::require;

namespace {

// Megatron's --cp-comm-type values: p2p is Tessera's ring attention; the others are other algorithms.
const char* cp_comm_type_missing(const std::string& v) {
  if (v == "a2a") return "Megatron's all-to-all (Ulysses-style: heads scattered over the cp ranks) is not built";
  if (v == "allgather" || v == "all_gather")
    return "Megatron's all-gather of the keys and values is not built";
  if (v == "a2a+p2p")
    return "Megatron's hierarchical all-to-all then ring (with --hierarchical-context-parallel-sizes) is not built";
  return nullptr;
}

// One value for every layer, or one per layer (Megatron-Core: as many as --num-layers); p2p only, since
// that is the attention Tessera runs. Without cp > 1 Megatron ignores it, and so does Tessera.
void finalize_cp_comm_type(const TrainArguments& a) {
  const std::vector<std::string>& types = a.cp_comm_type;
  for (const std::string& v : types)
    require(v == "p2p" || cp_comm_type_missing(v) != nullptr, "--cp-comm-type", v,
            "must be p2p, a2a, allgather or a2a+p2p (Megatron's values)");
  if (a.context_parallel_size == 1) return;
  require(types.size() == 1 || static_cast<int64_t>(types.size()) == a.model.num_layers, "--cp-comm-type",
          str_cat(types.size(), " values"),
          str_cat("must be one value or one per layer (--num-layers=", a.model.num_layers, ")"));
  for (const std::string& v : types)
    if (const char* why = cp_comm_type_missing(v))
      require(false, "--cp-comm-type", v,
              str_cat("cannot be used with --context-parallel-size=", a.context_parallel_size,
                      ": Tessera's context parallelism is ring attention (Megatron's p2p); ", why));
}

}  // namespace

void finalize_context_parallel(TrainArguments& a) {
  finalize_cp_comm_type(a);
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
  // Megatron's capacity is of the tokens one rank routes, so each cp rank would cap its own chunks: the
  // tokens dropped would depend on cp, unlike the single-process run over the whole sequence.
  require(a.model.moe.dropless(), "--moe-expert-capacity-factor", a.model.moe.capacity_factor,
          str_cat("cannot be combined with --context-parallel-size=", cp,
                  " yet (issue 37): each rank would cap the tokens of its own chunks, not the whole sequence's, "
                  "so the tokens dropped would depend on cp"));
  not_yet(a.token_slices.empty(),
          "--pipeline-token-slices (TeraPipe's slices are consecutive and attend to the earlier slices' caches on "
          "the same rank, while a cp rank holds two distant chunks whose earlier keys are on other ranks)");
  not_yet(!a.kd,
          "--kd (the teacher runs the whole sequence on each rank and its logits are not cut to the rank's two "
          "chunks)");
  // The distributed optimizer reduce-scatters the dense gradients over data x context as the all-reduce
  // sums them; --bf16 and --fp16 run the ring on 16-bit inputs with the log-sum-exp merge in fp32, and
  // fp16's overflow check reads gradients already reduced over data x context, so every rank skips alike.
}

}  // namespace tessera::train
