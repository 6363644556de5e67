// The hardware a plan is made for: one device type, how many, how they are grouped into nodes, and
// what the links between them cost. A built-in table covers the GPUs of the Megatron papers and later
// ones; `--cluster FILE.json` (or `tessera plan --calibrate`, which measures this machine) overrides it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::plan {

struct DeviceSpec {
  std::string name;
  double peak_flops = 0;          // dense 16-bit tensor-core FLOP/s (GPUs); fp32 FLOP/s (CPU)
  double gemm_efficiency = 0.7;   // fraction of peak_flops a large GEMM sustains in the software measured
  double memory_bytes = 0;        // usable device memory
  double memory_bandwidth = 0;    // bytes/s a streaming kernel sustains
  // Links, as the bus bandwidth of an NCCL/MPI collective (time = algorithm factor * bytes / bandwidth):
  double intra_node_bandwidth = 0;  // bytes/s per device inside a node (NVLink/NVSwitch; shared memory on CPU)
  double intra_node_latency = 0;    // seconds per step of a ring
  double inter_node_bandwidth = 0;  // bytes/s per device across nodes (its share of the node's NICs)
  double inter_node_latency = 0;
  int devices_per_node = 8;
  double reserved_bytes = 0;        // runtime, CUDA context, NCCL and allocator slack: never available
  // Measured GEMM rates (FLOP/s) by shape, from --calibrate; used instead of peak * efficiency when the
  // shape (m, n, k) was measured.
  struct GemmRate {
    long long m, n, k;
    double flops_per_second;
  };
  std::vector<GemmRate> gemm_rates;
  double attention_flops_per_second = 0;  // measured flash-attention rate (CPU); 0: roofline
  // Fixed costs that do not shrink with the work, which decide how short a TeraPipe token slice may be:
  // every kernel costs at least kernel_seconds (launch and ramp on a GPU, a parallel region's start on
  // a CPU), paid per kernel of a layer (time_model.h); and a GEMM with fewer than gemm_min_rows rows
  // takes as long as one with gemm_min_rows (a GPU's tensor-core kernels compute whole row tiles, so a
  // 64-row product fills half of each 128-row tile). 0: none.
  double kernel_seconds = 0;
  double gemm_min_rows = 0;
};

struct ClusterSpec {
  DeviceSpec device;
  int num_devices = 1;
  // For a file written by `tessera plan --calibrate`: the run and machine it measured
  // (plan/calibration.h's calibration_key); null otherwise.
  nlohmann::json calibrated_for;
};

// The built-in devices: V100-32GB, A100-80GB, H100-SXM, H200 and cpu (this kind of machine; a guess
// until --calibrate measures it). Names match case-insensitively.
const std::vector<DeviceSpec>& builtin_devices();
// Throws an Error listing the known names when `name` is not one of them.
DeviceSpec find_device(const std::string& name);

// A device as JSON (all fields above) and back. Missing fields keep the values of `base`, so a file
// may override only some numbers of a built-in device ({"base": "A100-80GB", "inter_node_bandwidth": ...}).
nlohmann::json to_json(const DeviceSpec& d);
DeviceSpec device_from_json(const nlohmann::json& j);
// Reads a cluster file: {"device": {...}, "num_devices": N}; throws an Error naming the file and field.
ClusterSpec read_cluster_file(const std::string& path);

// Costs of communication among `group` devices whose ranks are `stride` apart (tensor-fastest layout:
// the tensor group has stride 1, the data-parallel group stride tp, the pipeline neighbours stride
// tp * dp). The group crosses nodes when it does not fit in one; then each node's members share their
// NICs: a ring runs at the members-per-node multiple of the per-device inter-node bandwidth.
struct GroupLinks {
  double bandwidth, latency;
  bool crosses_nodes;
};
GroupLinks group_links(const DeviceSpec& d, int group, int stride);
double all_reduce_seconds(const DeviceSpec& d, double bytes, int group, int stride);
double all_gather_seconds(const DeviceSpec& d, double bytes, int group, int stride);  // bytes: gathered total
double reduce_scatter_seconds(const DeviceSpec& d, double bytes, int group, int stride);
// An all-to-all in which each member sends `bytes` in all, an equal share to every member (its own share
// stays). The shares for members on other nodes leave through this device's NIC share, those for its
// node's members over the intra-node links, both at once; one step per peer.
double all_to_all_seconds(const DeviceSpec& d, double bytes, int group, int stride);
// One message between pipeline neighbours `stride` ranks apart.
double p2p_seconds(const DeviceSpec& d, double bytes, int stride);

}  // namespace tessera::plan
