#include "plan/layout.h"

#include "core/check.h"

namespace tessera::plan {
namespace {

// The rules of train::finalize_moe_layout, for the planner's layouts.
std::string expert_problem(const model::ModelConfig& c, const Layout& l, int devices) {
  const model::MoeConfig& m = c.moe;
  if (l.ep < 1 || l.etp < 0) return str_cat("ep and etp must be positive (", describe(l), ")");
  if (!m.enabled()) return l.ep == 1 ? "" : str_cat("expert parallelism (ep ", l.ep, ") needs --num-experts");
  const int etp = l.expert_tp();
  if (devices % (static_cast<int64_t>(etp) * l.ep * l.pp) != 0)
    return str_cat("etp ", etp, " x ep ", l.ep, " x pp ", l.pp, " does not divide the ", devices, " devices");
  for (int64_t e : m.layer_experts)
    if (e % l.ep != 0) return str_cat("--num-experts=", e, " is not divisible by ep ", l.ep);
  if (m.ffn_hidden_size % etp != 0)
    return str_cat("--moe-ffn-hidden-size=", m.ffn_hidden_size, " is not divisible by etp ", etp);
  if (m.shared_expert_intermediate_size % l.tp != 0)
    return str_cat("--moe-shared-expert-intermediate-size=", m.shared_expert_intermediate_size,
                   " is not divisible by tp ", l.tp);
  // Each tensor rank routes its own sequence shard, so that no token is routed twice (Megatron's rule).
  if (l.tp > 1 && !l.sequence_parallel) return str_cat("MoE under tp ", l.tp, " needs --sequence-parallel");
  return "";
}

// The rules of train::finalize_context_parallel that concern the layout.
std::string context_problem(const model::ModelConfig& c, const Layout& l) {
  if (l.cp == 1) return "";
  if (c.seq_length % (2 * l.cp) != 0)
    return str_cat("--seq-length=", c.seq_length, " is not divisible by 2 x cp ", l.cp,
                   " (the sequence is cut into 2 x cp chunks)");
  if (l.sequence_parallel && (c.seq_length / l.cp) % l.tp != 0)
    return str_cat("--seq-length=", c.seq_length, " / cp ", l.cp, " is not divisible by tp ", l.tp,
                   " with --sequence-parallel");
  // MoE layers compose (each rank routes its seq / cp tokens, which routed_rows counts), token dropping
  // does not: a capacity caps one rank's tokens, so the tokens dropped would depend on cp.
  if (c.moe.enabled() && !c.moe.dropless())
    return str_cat("context parallelism (cp ", l.cp, ") with an expert capacity (--moe-expert-capacity-factor) "
                   "is not built yet");
  if (!l.token_slices.empty()) return str_cat("context parallelism (cp ", l.cp, ") with token slices is not built yet");
  return "";
}

// The trainer's zero-bubble rules (train/args/arguments_parallel.cc, pipeline::validate_schedule).
std::string zero_bubble_problem(const Layout& l) {
  if (l.zero_bubble == pipeline::ZeroBubble::Off) return "";
  const bool v = l.zero_bubble == pipeline::ZeroBubble::V;
  const char* name = v ? "ZB-V" : "ZB-H1";
  if (!l.token_slices.empty()) return str_cat(name, " cannot be combined with token slices");
  if (l.virtual_stages != (v ? 2 : 1))
    return str_cat(name, v ? " places two model chunks on each rank (v 2)" : " is 1F1B's placement (v 1)", ", not v ",
                   l.virtual_stages);
  if (v && l.pp == 1) return "ZB-V needs pipeline parallelism (pp > 1)";
  return "";
}

}  // namespace

pipeline::ScheduleShape schedule_shape(const Layout& l) {
  pipeline::ScheduleShape shape{l.pp, static_cast<int>(l.micro_batches()), l.virtual_stages,
                                l.token_slices.empty() ? 1 : static_cast<int>(l.token_slices.size())};
  shape.zero_bubble = l.zero_bubble;
  return shape;
}

int head_stage(const Layout& l) { return l.zero_bubble == pipeline::ZeroBubble::V ? 0 : l.pp - 1; }

std::string layout_problem(const model::ModelConfig& c, const Layout& l, int devices, std::string* family) {
  auto fail = [&](const char* kind, std::string why) {
    if (family) *family = kind;
    return why;
  };
  if (l.tp < 1 || l.cp < 1 || l.pp < 1 || l.dp < 1 || l.virtual_stages < 1)
    return fail("devices", str_cat("tp, cp, pp, dp and v must be positive (", describe(l), ")"));
  if (l.devices() != devices)
    return fail("devices", str_cat("tp ", l.tp, l.cp > 1 ? str_cat(" x cp ", l.cp) : std::string(), " x pp ", l.pp,
                                   " x dp ", l.dp, " = ", l.devices(), " is not the ", devices, " devices"));
  if (c.num_attention_heads % l.tp != 0)
    return fail("divisibility", str_cat("--num-attention-heads=", c.num_attention_heads, " is not divisible by tp ", l.tp));
  if (c.num_query_groups % l.tp != 0)
    return fail("divisibility", str_cat("--num-query-groups=", c.num_query_groups, " is not divisible by tp ", l.tp));
  if (c.ffn_hidden_size % l.tp != 0)
    return fail("divisibility", str_cat("--ffn-hidden-size=", c.ffn_hidden_size, " is not divisible by tp ", l.tp));
  if (l.sequence_parallel && c.seq_length % l.tp != 0)
    return fail("divisibility", str_cat("--seq-length=", c.seq_length, " is not divisible by tp ", l.tp,
                                        " with --sequence-parallel"));
  if (std::string why = context_problem(c, l); !why.empty()) return fail("divisibility", why);
  const pipeline::LayerSplit split = l.layer_split(c.num_layers);
  if (split.counted_layers() % (static_cast<int64_t>(l.pp) * l.virtual_stages) != 0)
    return fail("divisibility", str_cat("--num-layers=", c.num_layers,
                                        split.accounts() ? str_cat(" (", split.counted_layers(),
                                                                   " with the embedding and/or the loss counted)")
                                                         : std::string(),
                                        " does not split over pp ", l.pp, " x v ", l.virtual_stages, " model chunks"));
  if (split.accounts() && l.zero_bubble == pipeline::ZeroBubble::V)
    return fail("divisibility", "--account-for-embedding/loss-in-pipeline-split cannot be combined with ZB-V, which "
                                "splits the layers evenly over the V's chunks");
  if (l.virtual_stages > 1 && l.pp == 1)
    return fail("divisibility", "interleaving (v > 1) needs pipeline parallelism (pp > 1)");
  if (std::string why = expert_problem(c, l, devices); !why.empty()) return fail("experts", why);
  if (l.micro_batch_size < 1 || l.global_batch_size % (l.micro_batch_size * l.dp) != 0)
    return fail("batch", str_cat("--global-batch-size=", l.global_batch_size, " is not divisible by --micro-batch-size=",
                                 l.micro_batch_size, " x dp ", l.dp));
  if (std::string why = zero_bubble_problem(l); !why.empty()) return fail("divisibility", why);
  if (l.virtual_stages > 1 && l.zero_bubble == pipeline::ZeroBubble::Off && l.micro_batches() % l.pp != 0)
    return fail("batch", str_cat("the interleaved schedule needs the number of micro-batches (", l.micro_batches(),
                                 ") to be a multiple of pp ", l.pp));
  if (l.recompute == Recompute::Full && l.recompute_num_layers < 1)
    return fail("divisibility", str_cat("--recompute-num-layers=", l.recompute_num_layers, " must be positive"));
  if (!l.token_slices.empty()) {
    int64_t total = 0;
    for (int64_t length : l.token_slices) {
      if (length < 1) return fail("divisibility", str_cat("token slices ", token_slices_string(l), " must be positive"));
      total += length;
    }
    if (total != c.seq_length)
      return fail("divisibility", str_cat("token slices ", token_slices_string(l), " sum to ", total,
                                          ", not --seq-length=", c.seq_length));
    if (l.virtual_stages > 1)
      return fail("divisibility", "token slices need v = 1 (the token-level schedule is 1F1B over the slices)");
  }
  return "";
}

std::string token_slices_string(const Layout& l) {
  std::string out;  // runs of equal lengths as "count x length": 26 slices read "22x80,4x72"
  for (size_t i = 0; i < l.token_slices.size();) {
    size_t j = i;
    while (j < l.token_slices.size() && l.token_slices[j] == l.token_slices[i]) ++j;
    out += str_cat(out.empty() ? "" : ",", j - i > 1 ? str_cat(j - i, "x") : std::string(), l.token_slices[i]);
    i = j;
  }
  return out;
}

std::string to_string(Recompute r) {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
  }
  return "?";
}

std::string to_string(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Bf16: return "bf16";
    case Precision::Fp16: return "fp16";
  }
  return "?";
}

std::string describe(const Layout& l) {
  const std::string experts = l.ep > 1 || l.etp > 0 ? str_cat(" ep", l.ep, " etp", l.expert_tp()) : "";
  return str_cat("tp", l.tp, l.cp > 1 ? str_cat(" cp", l.cp) : std::string(), " pp", l.pp, " dp", l.dp, experts, " v", l.virtual_stages,
                 l.zero_bubble == pipeline::ZeroBubble::H1 ? " zb-h1" : l.zero_bubble == pipeline::ZeroBubble::V ? " zb-v" : "",
                 l.embedding_in_split ? " embedding-in-split" : "", l.loss_in_split ? " loss-in-split" : "",
                 " mbs", l.micro_batch_size, " gbs",
                 l.global_batch_size, l.sequence_parallel ? " sp" : "", " recompute=", to_string(l.recompute),
                 l.distributed_optimizer ? " distopt" : "",
                 l.token_slices.empty() ? "" : str_cat(" slices=", token_slices_string(l)));
}

model::ModelConfig config_for_tp(const model::ModelConfig& c, int tp, int64_t make_vocab_size_divisible_by) {
  model::ModelConfig out = c;
  out.padded_vocab_size = model::padded_vocab_size(c.vocab_size, make_vocab_size_divisible_by, tp);
  return out;
}

}  // namespace tessera::plan
