// The mixture-of-experts flags (Megatron-Core's --num-experts and --moe-*, DeepSpeed-MoE's pyramid
// and residual forms) and their rules: those of the model here, those of the expert-parallel layout
// in finalize_moe_layout.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "train/args/argument_rules.h"
#include "train/args/arguments.h"

namespace tessera::train {
namespace {

using rules::require;
using rules::require_positive;

// --num-experts as written: "8 4 4 2".
std::string join_values(const std::vector<int64_t>& values) {
  std::string s;
  for (int64_t v : values) s += (s.empty() ? "" : " ") + std::to_string(v);
  return s;
}

// Megatron's --moe-layer-freq as a list: a Python expression of integer lists joined by + and
// repeated by *, e.g. "([0]+[1]*3)*2" or "[1,0,1,1]".
class LayerPatternParser {
 public:
  explicit LayerPatternParser(const std::string& text) : s_(text) {}
  std::vector<int64_t> parse() {
    std::vector<int64_t> v = sum();
    skip_spaces();
    if (at_ != s_.size()) fail("unexpected '" + s_.substr(at_, 1) + "'");
    return v;
  }

 private:
  std::vector<int64_t> sum() {
    std::vector<int64_t> v = product();
    while (accept('+')) {
      std::vector<int64_t> more = product();
      v.insert(v.end(), more.begin(), more.end());
    }
    return v;
  }
  std::vector<int64_t> product() {
    std::vector<int64_t> v = atom();
    while (accept('*')) {
      const int64_t times = number();
      if (times < 0 || times > 1000000) fail("a repeat count must be in [0, 1000000]");
      std::vector<int64_t> repeated;
      for (int64_t i = 0; i < times; ++i) repeated.insert(repeated.end(), v.begin(), v.end());
      v = std::move(repeated);
    }
    return v;
  }
  std::vector<int64_t> atom() {
    std::vector<int64_t> v;
    if (accept('(')) {
      v = sum();
      expect(')');
    } else {
      expect('[');
      if (!accept(']')) {
        do v.push_back(number());
        while (accept(','));
        expect(']');
      }
    }
    return v;
  }
  int64_t number() {
    skip_spaces();
    const size_t start = at_;
    while (at_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at_]))) ++at_;
    if (at_ == start || at_ - start > 9) fail("expected a number");
    return std::stoll(s_.substr(start, at_ - start));
  }
  void skip_spaces() {
    while (at_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[at_]))) ++at_;
  }
  bool accept(char c) {
    skip_spaces();
    if (at_ < s_.size() && s_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) fail(std::string("expected '") + c + "'");
  }
  [[noreturn]] void fail(const std::string& what) {
    throw Error(str_cat("--moe-layer-freq=", s_, ": ", what, " at character ", at_ + 1,
                        " (an interval such as 2, or a list such as \"([0]+[1]*23)\")"));
  }
  const std::string& s_;
  size_t at_ = 0;
};

// Which layers are MoE layers, 1 for each: every N-th from the first (an interval N, as Megatron's
// `i % N == 0` over 0-based layers) or a list with one entry per layer.
std::vector<int64_t> moe_layer_pattern(const std::string& freq, int64_t num_layers) {
  const bool interval = !freq.empty() && std::all_of(freq.begin(), freq.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  std::vector<int64_t> pattern;
  if (interval) {
    require(freq.size() <= 9 && std::stoll(freq) > 0, "--moe-layer-freq", freq, "must be a positive interval or a list");
    const int64_t n = std::stoll(freq);
    for (int64_t i = 0; i < num_layers; ++i) pattern.push_back(i % n == 0 ? 1 : 0);
    return pattern;
  }
  pattern = LayerPatternParser(freq).parse();
  require(static_cast<int64_t>(pattern.size()) == num_layers, "--moe-layer-freq", freq,
          str_cat("has ", pattern.size(), " entries for --num-layers=", num_layers));
  for (int64_t p : pattern) require(p == 0 || p == 1, "--moe-layer-freq", freq, "entries must be 0 or 1");
  return pattern;
}

template <typename E>
E choose(const char* flag, const std::string& value, const std::vector<std::pair<std::string, E>>& names) {
  std::string known;
  for (const auto& [name, e] : names) {
    if (name == value) return e;
    known += (known.empty() ? "" : ", ") + name;
  }
  throw Error(str_cat(flag, "=", value, ": must be one of ", known));
}

// Aux-loss-free balancing and group-limited routing (Megatron's TransformerConfig rules, and the
// ones its group_limited_topk assumes without checking).
void finalize_router_balancing(TrainArguments& a) {
  model::MoeConfig& m = a.model.moe;
  const int64_t k = m.router.topk, G = m.router.num_groups, g = m.router.group_topk;
  require(!m.expert_bias || m.router.score == kernels::RouterScoreFunction::Sigmoid, "--moe-router-enable-expert-bias",
          "set", str_cat("needs --moe-router-score-function sigmoid (the bias is added to the sigmoid scores, as "
                         "Megatron), not ", a.moe_router_score_function));
  require(std::isfinite(a.moe_router_bias_update_rate) && a.moe_router_bias_update_rate >= 0,
          "--moe-router-bias-update-rate", a.moe_router_bias_update_rate, "must be a finite number >= 0");
  require(G >= 0, "--moe-router-num-groups", G, "must be positive (or 0: no group-limited routing)");
  require(g >= 0, "--moe-router-group-topk", g, "must be positive (or 0: no group-limited routing)");
  require(G == 0 || g > 0, "--moe-router-num-groups", G, "needs --moe-router-group-topk (the groups each token uses)");
  if (g == 0) return;
  require(G > 0, "--moe-router-group-topk", g, "needs --moe-router-num-groups (as Megatron)");
  require(g <= G, "--moe-router-group-topk", g, str_cat("must not exceed --moe-router-num-groups=", G));
  for (int64_t e : m.layer_experts)
    require(e == 0 || e % G == 0, "--moe-router-num-groups", G, str_cat("must divide --num-experts=", e));
  require(k % g == 0, "--moe-router-topk", k,
          str_cat("must be divisible by --moe-router-group-topk=", g, " (a group's score is the sum of its top "
                  "topk / group-topk scores)"));
  for (int64_t e : m.layer_experts)
    require(e == 0 || k / g <= e / G, "--moe-router-topk", k,
            str_cat("must not exceed --moe-router-group-topk=", g, " x the ", e / G, " experts of a group (",
                    e, " experts in ", G, " groups)"));
}

}  // namespace

void add_moe_flags(CLI::App& app, TrainArguments& a) {
  model::MoeConfig& m = a.model.moe;
  // Several values are one option (argparse's nargs='+').
  keep_last_occurrence(app.add_option("--num-experts", a.num_experts,
                                      "Experts per MoE layer; several values: one per MoE layer (DeepSpeed's "
                                      "pyramid, PR-MoE)"));
  app.add_option("--moe-layer-freq", a.moe_layer_freq, "Every N-th layer is MoE, or a list such as \"([0]+[1]*23)\"");
  app.add_option("--moe-ffn-hidden-size", m.ffn_hidden_size, "Each expert's MLP width (default --ffn-hidden-size)");
  app.add_option("--moe-router-topk", m.router.topk, "Experts each token is routed to");
  app.add_flag("--moe-router-pre-softmax", m.router.pre_softmax, "Softmax over all experts before the top-k");
  app.add_option("--moe-router-score-function", a.moe_router_score_function, "softmax or sigmoid");
  app.add_option("--moe-router-topk-scaling-factor", m.router.scaling_factor, "Multiplies the routing probabilities");
  app.add_option("--moe-router-num-groups", m.router.num_groups,
                 "Group-limited routing: the experts in this many groups (DeepSeek's node-limited routing)");
  app.add_option("--moe-router-group-topk", m.router.group_topk,
                 "Group-limited routing: each token chooses experts within this many groups");
  app.add_flag("--moe-router-enable-expert-bias", m.expert_bias,
               "Aux-loss-free balancing: a per-expert bias on the sigmoid scores for the selection only");
  app.add_option("--moe-router-bias-update-rate", a.moe_router_bias_update_rate,
                 "The expert bias's step per global batch (default 1e-3)");
  app.add_option("--moe-router-load-balancing-type", a.moe_router_load_balancing_type,
                 "aux_loss, seq_aux_loss or none");
  app.add_option("--moe-aux-loss-coeff", m.aux_loss_coeff, "Coefficient of the load-balancing loss");
  app.add_option("--moe-z-loss-coeff", m.z_loss_coeff, "Coefficient of the router z-loss (0: none)");
  app.add_option("--moe-input-jitter-eps", m.input_jitter_eps, "Router input noise U(1-eps, 1+eps) (0: none)");
  app.add_option("--moe-expert-capacity-factor", m.capacity_factor,
                 "Tokens an expert takes, as a multiple of an even share (negative or unset: dropless)");
  app.add_option("--moe-token-drop-policy", a.moe_token_drop_policy, "probs or position: which tokens over capacity stay");
  app.add_flag("--moe-pad-expert-input-to-capacity", m.pad_expert_input_to_capacity,
               "Every expert takes exactly its capacity (static shapes)");
  app.add_option("--moe-shared-expert-intermediate-size", m.shared_expert_intermediate_size,
                 "Width of a shared expert every token passes through (0: none)");
  app.add_option("--mlp-type", a.mlp_type, "standard, or residual: DeepSpeed-MoE's residual MoE");
}

void add_expert_parallel_flags(CLI::App& app, TrainArguments& a) {
  app.add_option("--expert-model-parallel-size", a.expert_model_parallel_size, "Expert-parallel size");
  app.add_option("--expert-tensor-parallel-size", a.expert_tensor_parallel_size,
                 "Tensor-parallel size of the experts (default --tensor-model-parallel-size)");
  app.add_option("--moe-token-dispatcher-type", a.moe_token_dispatcher_type, "alltoall or allgather");
  app.add_flag("--moe-grouped-gemm", a.model.moe.grouped_gemm,
               "Run each rank's local experts as one batched product per linear layer");
}

void finalize_moe_model(TrainArguments& a) {
  model::ModelConfig& c = a.model;
  model::MoeConfig& m = c.moe;
  m.router.score = choose<kernels::RouterScoreFunction>(
      "--moe-router-score-function", a.moe_router_score_function,
      {{"softmax", kernels::RouterScoreFunction::Softmax}, {"sigmoid", kernels::RouterScoreFunction::Sigmoid}});
  m.load_balancing = choose<model::LoadBalancing>("--moe-router-load-balancing-type", a.moe_router_load_balancing_type,
                                                  {{"aux_loss", model::LoadBalancing::AuxLoss},
                                                   {"seq_aux_loss", model::LoadBalancing::SeqAuxLoss},
                                                   {"none", model::LoadBalancing::None}});
  m.token_drop_policy = choose<kernels::TokenDropPolicy>(
      "--moe-token-drop-policy", a.moe_token_drop_policy,
      {{"probs", kernels::TokenDropPolicy::Probs}, {"position", kernels::TokenDropPolicy::Position}});
  m.residual = choose<bool>("--mlp-type", a.mlp_type, {{"standard", false}, {"residual", true}});
  // --num-experts 0 is Megatron's "None": a dense model.
  const bool moe = !a.num_experts.empty() && !(a.num_experts.size() == 1 && a.num_experts[0] == 0);
  m.layer_experts.clear();
  if (!moe) {
    require(!m.residual, "--mlp-type", a.mlp_type, "needs --num-experts");
    require(!m.expert_bias, "--moe-router-enable-expert-bias", "set", "needs --num-experts (an MoE model)");
    require(m.router.num_groups == 0, "--moe-router-num-groups", m.router.num_groups, "needs --num-experts (an MoE model)");
    require(m.router.group_topk == 0, "--moe-router-group-topk", m.router.group_topk, "needs --num-experts (an MoE model)");
    return;
  }
  for (int64_t e : a.num_experts) require_positive("--num-experts", e);
  const std::vector<int64_t> pattern = moe_layer_pattern(a.moe_layer_freq, c.num_layers);
  const int64_t moe_layers = std::count(pattern.begin(), pattern.end(), int64_t{1});
  require(moe_layers > 0, "--moe-layer-freq", a.moe_layer_freq, "makes no layer an MoE layer");
  require(a.num_experts.size() == 1 || static_cast<int64_t>(a.num_experts.size()) == moe_layers, "--num-experts",
          join_values(a.num_experts),
          str_cat(a.num_experts.size(), " values; must be one, or one per MoE layer (", moe_layers, ")"));
  for (size_t layer = 0, k = 0; layer < pattern.size(); ++layer)
    m.layer_experts.push_back(pattern[layer] ? a.num_experts[a.num_experts.size() == 1 ? 0 : k++] : 0);
  if (m.ffn_hidden_size == 0) m.ffn_hidden_size = c.ffn_hidden_size;
  require_positive("--moe-ffn-hidden-size", m.ffn_hidden_size);
  const int64_t fewest = *std::min_element(a.num_experts.begin(), a.num_experts.end());
  require(m.router.topk >= 1 && m.router.topk <= fewest, "--moe-router-topk", m.router.topk,
          str_cat("must be in [1, ", fewest, "] (the experts of a layer)"));
  require(m.router.scaling_factor > 0, "--moe-router-topk-scaling-factor", m.router.scaling_factor, "must be positive");
  require(m.aux_loss_coeff >= 0, "--moe-aux-loss-coeff", m.aux_loss_coeff, "must be >= 0");
  require(m.z_loss_coeff >= 0, "--moe-z-loss-coeff", m.z_loss_coeff, "must be >= 0");
  require(m.input_jitter_eps >= 0 && m.input_jitter_eps < 1, "--moe-input-jitter-eps", m.input_jitter_eps,
          "must be in [0, 1)");
  if (m.capacity_factor < 0) m.capacity_factor = -1;
  require(m.capacity_factor != 0, "--moe-expert-capacity-factor", m.capacity_factor,
          "must be positive (or negative for dropless routing)");
  require(!m.pad_expert_input_to_capacity || !m.dropless(), "--moe-pad-expert-input-to-capacity", "set",
          "needs --moe-expert-capacity-factor");
  require(m.shared_expert_intermediate_size >= 0, "--moe-shared-expert-intermediate-size",
          m.shared_expert_intermediate_size, "must be >= 0");
  finalize_router_balancing(a);
}

void finalize_moe_layout(TrainArguments& a) {
  const model::MoeConfig& m = a.model.moe;
  const int64_t tp = a.tensor_model_parallel_size, pp = a.pipeline_model_parallel_size;
  const int64_t ep = a.expert_model_parallel_size;
  require_positive("--expert-model-parallel-size", ep);
  if (a.expert_tensor_parallel_size == 0) a.expert_tensor_parallel_size = tp;
  const int64_t etp = a.expert_tensor_parallel_size;
  require_positive("--expert-tensor-parallel-size", etp);
  require(a.moe_token_dispatcher_type == "alltoall" || a.moe_token_dispatcher_type == "allgather",
          "--moe-token-dispatcher-type", a.moe_token_dispatcher_type, "must be alltoall or allgather");
  if (!m.enabled()) {
    require(ep == 1, "--expert-model-parallel-size", ep, "needs --num-experts");
    return;
  }
  require(a.world_size % (etp * ep * pp) == 0, "--expert-model-parallel-size", ep,
          str_cat("x --expert-tensor-parallel-size=", etp, " x --pipeline-model-parallel-size=", pp,
                  " must divide the number of ranks (", a.world_size, ")"));
  for (int64_t e : m.layer_experts)
    require(e == 0 || e % ep == 0, "--num-experts", e,
            str_cat("must be divisible by --expert-model-parallel-size=", ep));
  require(m.ffn_hidden_size % etp == 0, "--moe-ffn-hidden-size", m.ffn_hidden_size,
          str_cat("must be divisible by --expert-tensor-parallel-size=", etp));
  require(m.shared_expert_intermediate_size % tp == 0, "--moe-shared-expert-intermediate-size",
          m.shared_expert_intermediate_size, str_cat("must be divisible by --tensor-model-parallel-size=", tp));
  // Megatron's rule: each tensor rank then routes its own sequence shard, so no token is routed twice.
  require(tp == 1 || a.sequence_parallel, "--tensor-model-parallel-size", tp,
          "needs --sequence-parallel with MoE (as Megatron: each tensor rank routes its sequence shard)");
}

}  // namespace tessera::train
