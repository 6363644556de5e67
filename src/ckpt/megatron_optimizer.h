// Adam's state in Megatron-LM's checkpoints, for resuming a Megatron run (tessera train --load DIR):
//
// Legacy format (model_optim_rng.pt's "optimizer"): torch's optimizer state dict, under "optimizer" beside
// "fp32_from_fp16_params" (the fp32 master weights of a bf16/fp16 model) for Megatron's mixed-precision
// optimizer, or itself for its fp32 one. It names parameters by number: "param_groups" list the numbers
// of each group and "state" holds each number's exp_avg, exp_avg_sq and step. Megatron numbers a rank's
// parameters group by group, as its _get_param_groups builds them: the parameters with weight decay and
// those without (biases and one-dimensional tensors: norms), each in named_parameters order, which is the
// order of the rank's model state dict (its model chunks in turn); each group's wd_mult (or weight_decay)
// tells which it is (Megatron-Core orders the groups as it first meets them, older versions the decayed
// one first, the guess where a group records neither). Every number's moments are checked
// against the shape of the parameter it stands for, so another order is an error, not a silent swap.
// A mixture of experts' file holds Megatron-Core's ChainedOptimizer's list instead, [the dense parameters'
// state dict, the experts'], each numbering its own parameters so (megatron_legacy.cc reads each for its part).
// The legacy distributed optimizer keeps its moments in distrib_optim.pt as flat buffers: not read.
//
// torch_dist: the moments are sharded tensors beside the weights, "optimizer.state.exp_avg.<model key>"
// and "optimizer.state.exp_avg_sq.<model key>", chunked as the model key is (megatron_dist.cc reads them);
// the master weights are "optimizer.state.fp32_param.<key>" (or "optimizer.state.param.<key>" from the
// distributed optimizer's fully reshardable format), and the step is in common.pt.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/torch_file.h"

namespace tessera::ckpt {

// One parameter of a rank's file, in its model state dict's order.
struct MegatronParamShard {
  std::string key;  // Megatron's key, for errors
  Shape shape;
};

// Per parameter of the list given, in its order: the moments and, when the file has them, the fp32 master
// weights (else undefined tensors); all fp32.
struct MegatronOptimizerShards {
  std::vector<Tensor> exp_avg, exp_avg_sq, master;
  int64_t step = -1;  // the optimizer's step count (-1: not recorded)
};

// Reads a legacy file's "optimizer" entry for `params`. Errors name the file and what is wrong (no
// per-parameter state, a count or shape that disagrees with the model state dict).
MegatronOptimizerShards read_megatron_legacy_optimizer(const StateNode& optimizer, const std::string& file,
                                                       const std::vector<MegatronParamShard>& params);

// The step count an optimizer state dict records (torch's per-parameter "step", a param group's "step", or
// Megatron-Core's "common_step"), searched below `node`; -1 when none is.
int64_t megatron_optimizer_step(const StateNode& node);

}  // namespace tessera::ckpt
