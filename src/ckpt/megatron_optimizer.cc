#include "ckpt/megatron_optimizer.h"

#include <cmath>
#include <optional>

#include "ckpt/megatron_legacy.h"

namespace tessera::ckpt {

namespace {

// A number a state dict holds as a Python int or float, or a one-element tensor (torch's Adam keeps its
// step as a tensor).
std::optional<double> optimizer_number(const StateNode* n) {
  if (!n) return std::nullopt;
  if (n->is(StateNode::Kind::Int)) return static_cast<double>(n->integer);
  if (n->is(StateNode::Kind::Float)) return n->real;
  if (n->is(StateNode::Kind::Tensor) && n->tensor.numel() == 1) {
    const Tensor& t = n->tensor;
    if (t.dtype() == DType::F32) return t.host_f32()[0];
    if (t.dtype() == DType::I64) return static_cast<double>(t.host_i64()[0]);
    if (t.dtype() == DType::I32) return t.host_i32()[0];
    if (t.dtype() == DType::BF16 || t.dtype() == DType::F16) return megatron_to_fp32(t, "", "step").host_f32()[0];
  }
  return std::nullopt;
}

// The optimizer's fp32 moment (or master weight) of one parameter, its shape checked.
Tensor optimizer_tensor(const StateNode* n, const std::string& where, const MegatronParamShard& p) {
  TESSERA_CHECK(n && n->is(StateNode::Kind::Tensor), where, " is ", n ? state_kind_name(n->kind) : "missing",
                ", not a tensor (for ", p.key, ")");
  TESSERA_CHECK(n->tensor.shape() == p.shape, where, " has shape ", shape_str(n->tensor.shape()), " but the parameter it ",
                "stands for in Megatron's order (", p.key, ") is ", shape_str(p.shape),
                " (the optimizer numbers the parameters group by group, each group's in the model state dict's order)");
  return megatron_to_fp32(n->tensor, where, p.key);
}

}  // namespace

int64_t megatron_optimizer_step(const StateNode& node) {
  if (const auto v = optimizer_number(node.find("common_step")); v) return std::llround(*v);
  if (const auto v = optimizer_number(node.find("step")); v) return std::llround(*v);
  for (const StateEntry& e : node.entries)
    if (e.value.is(StateNode::Kind::Dict))
      if (const int64_t s = megatron_optimizer_step(e.value); s >= 0) return s;
  for (const StateNode& item : node.items)
    if (item.is(StateNode::Kind::Dict))
      if (const int64_t s = megatron_optimizer_step(item); s >= 0) return s;
  return -1;
}

MegatronOptimizerShards read_megatron_legacy_optimizer(const StateNode& opt, const std::string& file,
                                                       const std::vector<MegatronParamShard>& params) {
  // Megatron's mixed-precision optimizer nests torch's state dict under "optimizer"; its fp32 one is it.
  const StateNode* inner = opt.find("optimizer");
  std::string where = file + ": optimizer.optimizer";
  if (!inner || !inner->find("param_groups")) {
    inner = &opt;
    where = file + ": optimizer";
  }
  const StateNode* groups = inner->find("param_groups");
  TESSERA_CHECK(groups && groups->is(StateNode::Kind::List), where,
                " has no param_groups list: not a torch optimizer's state dict");
  const StateNode* state = inner->find("state");
  TESSERA_CHECK(state && state->is(StateNode::Kind::Dict) && !state->entries.empty(), where,
                " holds no per-parameter state (Megatron's distributed optimizer keeps its moments in "
                "distrib_optim.pt, whose flat buffers are not read: resume with --no-load-optim)");

  // Megatron's order: group by group, each group's parameters in the state dict's order. A group holds the
  // parameters with weight decay or those without (biases, norms); its wd_mult (or weight_decay) says which.
  // Megatron-Core orders the groups as it first meets them (so a pipeline stage that starts with a norm has
  // the group without decay first); older versions put the decayed group first, which is the guess for
  // groups that record neither.
  const auto decayed = [&](size_t i) {
    const std::string& k = params[i].key;
    return !(k.size() >= 5 && k.compare(k.size() - 5, 5, ".bias") == 0) && params[i].shape.size() != 1;
  };
  std::vector<size_t> by_class[2];  // [0]: decayed, [1]: not, in the state dict's order
  for (size_t i = 0; i < params.size(); ++i) by_class[decayed(i) ? 0 : 1].push_back(i);
  size_t next[2] = {0, 0};
  std::vector<size_t> order;
  std::vector<int64_t> ids;
  for (size_t g = 0; g < groups->items.size(); ++g) {
    const StateNode& group = groups->items[g];
    const StateNode* list = group.find("params");
    TESSERA_CHECK(list && (list->is(StateNode::Kind::List) || list->is(StateNode::Kind::Tuple)), where,
                  ".param_groups[", g, "] has no list of parameter numbers");
    std::optional<double> decay = optimizer_number(group.find("wd_mult"));
    if (!decay) decay = optimizer_number(group.find("weight_decay"));
    const int cls = decay ? (*decay > 0 ? 0 : 1) : (g == 0 ? 0 : 1);
    for (const StateNode& id : list->items) {
      TESSERA_CHECK(id.is(StateNode::Kind::Int), where, ".param_groups[", g, "] lists a ", state_kind_name(id.kind),
                    ", not a parameter number");
      TESSERA_CHECK(next[cls] < by_class[cls].size(), where, ".param_groups[", g, "] (", cls ? "without" : "with",
                    " weight decay) numbers more parameters than the file's model state dict has ",
                    cls ? "without" : "with", " it (", by_class[cls].size(), ")");
      ids.push_back(id.integer);
      order.push_back(by_class[cls][next[cls]++]);
    }
  }
  TESSERA_CHECK(ids.size() == params.size(), where, ": its param_groups number ", ids.size(),
                " parameters but the file's model state dict has ", params.size());

  MegatronOptimizerShards out;
  const size_t n = params.size();
  out.exp_avg.resize(n);
  out.exp_avg_sq.resize(n);
  out.master.resize(n);
  for (size_t k = 0; k < n; ++k) {
    const MegatronParamShard& p = params[order[k]];
    const std::string id = std::to_string(ids[k]);
    const StateNode* s = state->find(id);
    TESSERA_CHECK(s && s->is(StateNode::Kind::Dict), where, ".state has no entry ", id, " (", p.key, ")");
    out.exp_avg[order[k]] = optimizer_tensor(s->find("exp_avg"), str_cat(where, ".state[", id, "].exp_avg"), p);
    out.exp_avg_sq[order[k]] = optimizer_tensor(s->find("exp_avg_sq"), str_cat(where, ".state[", id, "].exp_avg_sq"), p);
    if (out.step < 0)
      if (const auto step = optimizer_number(s->find("step")); step) out.step = std::llround(*step);
  }
  if (out.step < 0) out.step = megatron_optimizer_step(*groups);  // apex's and TE's FusedAdam: per group

  // The fp32 master weights of a bf16/fp16 model, per group in the groups' order.
  if (const StateNode* masters = opt.find("fp32_from_fp16_params"); masters && masters->is(StateNode::Kind::List)) {
    size_t k = 0;
    for (size_t g = 0; g < masters->items.size(); ++g)
      for (size_t j = 0; j < masters->items[g].items.size(); ++j, ++k) {
        TESSERA_CHECK(k < n, file, ": optimizer.fp32_from_fp16_params holds more tensors than the ", n, " parameters");
        out.master[order[k]] = optimizer_tensor(&masters->items[g].items[j],
                                                str_cat(file, ": optimizer.fp32_from_fp16_params[", g, "][", j, "]"),
                                                params[order[k]]);
      }
    TESSERA_CHECK(k == 0 || k == n, file, ": optimizer.fp32_from_fp16_params holds ", k, " tensors for ", n,
                  " parameters");
  }
  return out;
}

}  // namespace tessera::ckpt
