// A GPU cluster calibrated from measurements rather than the built-in table (issue 56): the bus
// bandwidths NCCL reached (nccl-tests' all_reduce_perf, or bench_collectives --backend nccl) replace the
// table's link numbers, and a measured one-GPU training step (bench_gpu_train, or the "elapsed time per
// iteration" / "throughput per GPU" of a one-GPU `tessera train` or Megatron run) fixes the device's GEMM
// efficiency, the one fitted number of a table device (plan/cluster.cc). Both come as objects of a
// cluster file (docs/planning.md, "Calibrating a GPU cluster"); the step also as tessera plan's flags.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "plan/cluster.h"
#include "plan/layout.h"

namespace tessera::plan {

// The cluster file's "nccl" object, in the units nccl-tests prints (GB/s = 1e9 B/s, microseconds):
//   intra_node_busbw_gbps      all-reduce busbw among the GPUs of one node
//   inter_node_busbw_gbps      all-reduce busbw of a ring over whole nodes,
//   inter_node_ranks_per_node    run with this many GPUs of each node (default: the device's per node)
//   intra_node_latency_us, inter_node_latency_us   per ring step (optional)
//   measured_with              any object: the run that measured them (kept, not read)
// Each field optional; an unknown field is an Error naming it (a misspelt one would be ignored otherwise).
struct NcclBusBandwidths {
  double intra_node_busbw = 0, inter_node_busbw = 0;  // bytes/s; 0: not given
  int inter_node_ranks_per_node = 0;                  // 0: the device's devices_per_node
  double intra_node_latency = -1, inter_node_latency = -1;  // seconds; < 0: not given
};
NcclBusBandwidths nccl_bus_bandwidths_from_json(const nlohmann::json& j);

// The device with the measured links: intra_node_bandwidth = the intra-node busbw; inter_node_bandwidth
// = the inter-node busbw / ranks per node, the per-GPU share of the node's NICs that group_links
// multiplies back by the members of a ring on each node (cluster.h); the latencies as given. Returns
// one line per replaced number for the plan's printout.
std::vector<std::string> apply_nccl_bus_bandwidths(DeviceSpec& d, const NcclBusBandwidths& n);

// One training iteration of one micro-batch measured on one GPU (tp = cp = pp = dp = 1): forward,
// backward and the optimizer step of `model` at `layout`'s micro-batch and precision.
struct MeasuredStep {
  model::ModelConfig model;
  Layout layout;      // one GPU, global batch = micro batch
  double seconds = 0;
  std::string source;  // what measured it, for the printout
};

// The cluster file's "measured_step" object: the model by Megatron's flag names (num_layers, hidden_size,
// num_attention_heads, seq_length, padded_vocab_size required; ffn_hidden_size 4 h, num_query_groups the
// heads, kv_channels h / heads, swiglu false, hidden_dropout and attention_dropout 0.1 by default),
// micro_batch_size (1), precision ("bf16", "fp16" or "fp32"; "bf16"), use_flash_attn (false), source; and
// the measurement as one of elapsed_time_per_iteration_ms or throughput_per_gpu_tflops (Megatron's log:
// model FLOPs of model::model_flops_per_iteration per second). Errors name the field.
MeasuredStep measured_step_from_json(const nlohmann::json& j);

// A measured step of the plan's own model (tessera plan --measured-iteration-ms / --measured-tflops-per-gpu):
// its micro-batch, precision, recomputation and attention on one GPU. Give one of `milliseconds` and
// `tflops` (the other 0).
MeasuredStep measured_step_of_run(const model::ModelConfig& c, const Layout& run, double milliseconds, double tflops);

// The one-GPU step the planner predicts for the measured model on `d`.
double predicted_step_seconds(const DeviceSpec& d, const MeasuredStep& s);

// `d` with gemm_efficiency such that the planner's one-GPU step of the measured model takes the measured
// time (found by bisection: the predicted time falls as the efficiency rises). An Error naming the
// measurement when no efficiency in (0, 1] reaches it (faster than the device's peak allows, or so slow
// that it is not the GEMMs), or when the device has measured GEMM rates (--calibrate), which the
// efficiency does not scale. Returns the lines for the plan's printout in `notes`.
DeviceSpec fit_gemm_efficiency(const DeviceSpec& d, const MeasuredStep& s, std::vector<std::string>* notes = nullptr);

}  // namespace tessera::plan
