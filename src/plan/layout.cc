#include "plan/layout.h"

#include "core/check.h"

namespace tessera::plan {

std::string layout_problem(const model::ModelConfig& c, const Layout& l, int devices, std::string* family) {
  auto fail = [&](const char* kind, std::string why) {
    if (family) *family = kind;
    return why;
  };
  if (l.tp < 1 || l.pp < 1 || l.dp < 1 || l.virtual_stages < 1)
    return fail("devices", str_cat("tp, pp, dp and v must be positive (", describe(l), ")"));
  if (l.devices() != devices)
    return fail("devices", str_cat("tp ", l.tp, " x pp ", l.pp, " x dp ", l.dp, " = ", l.devices(), " is not the ",
                                   devices, " devices"));
  if (c.num_attention_heads % l.tp != 0)
    return fail("divisibility", str_cat("--num-attention-heads=", c.num_attention_heads, " is not divisible by tp ", l.tp));
  if (c.num_query_groups % l.tp != 0)
    return fail("divisibility", str_cat("--num-query-groups=", c.num_query_groups, " is not divisible by tp ", l.tp));
  if (c.ffn_hidden_size % l.tp != 0)
    return fail("divisibility", str_cat("--ffn-hidden-size=", c.ffn_hidden_size, " is not divisible by tp ", l.tp));
  if (l.sequence_parallel && c.seq_length % l.tp != 0)
    return fail("divisibility", str_cat("--seq-length=", c.seq_length, " is not divisible by tp ", l.tp,
                                        " with --sequence-parallel"));
  if (c.num_layers % (static_cast<int64_t>(l.pp) * l.virtual_stages) != 0)
    return fail("divisibility", str_cat("--num-layers=", c.num_layers, " does not split over pp ", l.pp, " x v ",
                                        l.virtual_stages, " model chunks"));
  if (l.virtual_stages > 1 && l.pp == 1)
    return fail("divisibility", "interleaving (v > 1) needs pipeline parallelism (pp > 1)");
  if (l.micro_batch_size < 1 || l.global_batch_size % (l.micro_batch_size * l.dp) != 0)
    return fail("batch", str_cat("--global-batch-size=", l.global_batch_size, " is not divisible by --micro-batch-size=",
                                 l.micro_batch_size, " x dp ", l.dp));
  if (l.virtual_stages > 1 && l.micro_batches() % l.pp != 0)
    return fail("batch", str_cat("the interleaved schedule needs the number of micro-batches (", l.micro_batches(),
                                 ") to be a multiple of pp ", l.pp));
  if (l.recompute == Recompute::Full && l.recompute_num_layers < 1)
    return fail("divisibility", str_cat("--recompute-num-layers=", l.recompute_num_layers, " must be positive"));
  return "";
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
  return str_cat("tp", l.tp, " pp", l.pp, " dp", l.dp, " v", l.virtual_stages, " mbs", l.micro_batch_size, " gbs",
                 l.global_batch_size, l.sequence_parallel ? " sp" : "", " recompute=", to_string(l.recompute),
                 l.distributed_optimizer ? " distopt" : "");
}

model::ModelConfig config_for_tp(const model::ModelConfig& c, int tp, int64_t make_vocab_size_divisible_by) {
  model::ModelConfig out = c;
  out.padded_vocab_size = model::padded_vocab_size(c.vocab_size, make_vocab_size_divisible_by, tp);
  return out;
}

}  // namespace tessera::plan
