#include "plan/cluster.h"

#include <algorithm>
#include <cctype>
#include <fstream>

#include "core/check.h"
#include "core/file_io.h"

namespace tessera::plan {
namespace {

constexpr double GB = 1e9, TFLOPS = 1e12, GiB = 1024.0 * 1024 * 1024;

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

// Peak FLOP/s, memory and link speeds are the vendors' figures (dense 16-bit tensor FLOP/s; NVLink
// per direction; a node's InfiniBand NICs divided among its GPUs), with the collective bus bandwidths
// that NCCL's all-reduce reaches on them. gemm_efficiency is the one fitted number per device: the
// fraction of peak that the GEMMs of the measured software reached. A100's 0.7 (218 TFLOP/s) is what
// cuBLAS gave Megatron's transformer GEMMs in 2021; V100's 0.38 is fitted to Megatron-LM's own
// single-GPU baseline (Shoeybi et al. 2019: 39 TFLOP/s for the 1.2B model, with their unfused 2019
// kernels). The tests in planner_test.cc check the other published points against these.
// The fixed costs are stated, not fitted: 5 us per GPU kernel (CUDA's launch latency and the ramp of a
// small kernel, paid in full by Megatron's eager, graph-less execution) and a 128-row GEMM tile (the
// tile height of cuBLAS's large tensor-core kernels); 2 us per CPU kernel (bench_small_kernels: a call
// of a few thousand elements costs 1.7 to 2.8 us, BENCHMARKS.md), which --calibrate measures.
const std::vector<DeviceSpec>& builtin_devices() {
  static const std::vector<DeviceSpec> devices = [] {
    std::vector<DeviceSpec> d;
    // DGX-2H: 16 V100 on NVSwitch, 8 x 100 Gb/s InfiniBand.
    d.push_back({"V100-32GB", 125 * TFLOPS, 0.38, 32 * GiB, 900 * GB * 0.85, 130 * GB, 2e-6, 100 * GB / 16,
                 10e-6, 16, 1.0 * GiB, {}, 0, 5e-6, 128});
    // DGX A100 (Selene): 8 A100-80GB, NVSwitch, 8 x 200 Gb/s HDR InfiniBand.
    d.push_back({"A100-80GB", 312 * TFLOPS, 0.70, 80 * GiB, 2039 * GB * 0.85, 230 * GB, 2e-6, 25 * GB, 10e-6, 8,
                 2.0 * GiB, {}, 0, 5e-6, 128});
    // DGX H100: 8 H100-SXM, NVLink 4, 8 x 400 Gb/s NDR InfiniBand.
    d.push_back({"H100-SXM", 989 * TFLOPS, 0.70, 80 * GiB, 3350 * GB * 0.85, 360 * GB, 8e-6, 50 * GB, 10e-6, 8,
                 2.0 * GiB, {}, 0, 5e-6, 128});
    d.push_back({"H200", 989 * TFLOPS, 0.70, 141 * GiB, 4800 * GB * 0.85, 360 * GB, 8e-6, 50 * GB, 10e-6, 8,
                 2.0 * GiB, {}, 0, 5e-6, 128});
    // A small x86 machine: a guess to be replaced by `tessera plan --calibrate`.
    d.push_back({"cpu", 100e9, 0.8, 16 * GiB, 10 * GB, 5 * GB, 5e-6, 1 * GB, 50e-6, 1, 64.0 * (1 << 20), {}, 0, 2e-6, 0});
    return d;
  }();
  return devices;
}

DeviceSpec find_device(const std::string& name) {
  std::string names;
  for (const DeviceSpec& d : builtin_devices()) {
    if (lower(d.name) == lower(name)) return d;
    names += (names.empty() ? "" : ", ") + d.name;
  }
  throw Error(str_cat("--device=", name, ": unknown device (known: ", names, "; or give --cluster FILE.json)"));
}

nlohmann::json to_json(const DeviceSpec& d) {
  nlohmann::json rates = nlohmann::json::array();
  for (const auto& r : d.gemm_rates) rates.push_back({{"m", r.m}, {"n", r.n}, {"k", r.k}, {"flops_per_second", r.flops_per_second}});
  return {{"name", d.name},
          {"peak_flops", d.peak_flops},
          {"gemm_efficiency", d.gemm_efficiency},
          {"memory_bytes", d.memory_bytes},
          {"memory_bandwidth", d.memory_bandwidth},
          {"intra_node_bandwidth", d.intra_node_bandwidth},
          {"intra_node_latency", d.intra_node_latency},
          {"inter_node_bandwidth", d.inter_node_bandwidth},
          {"inter_node_latency", d.inter_node_latency},
          {"devices_per_node", d.devices_per_node},
          {"reserved_bytes", d.reserved_bytes},
          {"gemm_rates", rates},
          {"attention_flops_per_second", d.attention_flops_per_second},
          {"kernel_seconds", d.kernel_seconds},
          {"gemm_min_rows", d.gemm_min_rows}};
}

DeviceSpec device_from_json(const nlohmann::json& j) {
  TESSERA_CHECK(j.is_object(), "device: expected a JSON object, got ", j.dump());
  DeviceSpec d = j.contains("base") ? find_device(j.at("base").get<std::string>()) : DeviceSpec{};
  auto number = [&](const char* key, double& field, bool positive) {
    if (!j.contains(key)) return;
    TESSERA_CHECK(j.at(key).is_number(), "device field \"", key, "\": expected a number, got ", j.at(key).dump());
    field = j.at(key).get<double>();
    TESSERA_CHECK(positive ? field > 0 : field >= 0, "device field \"", key, "\"=", field,
                  positive ? ": must be positive" : ": must be >= 0");
  };
  if (j.contains("name")) d.name = j.at("name").get<std::string>();
  number("peak_flops", d.peak_flops, true);
  number("gemm_efficiency", d.gemm_efficiency, true);
  number("memory_bytes", d.memory_bytes, true);
  number("memory_bandwidth", d.memory_bandwidth, true);
  number("intra_node_bandwidth", d.intra_node_bandwidth, true);
  number("intra_node_latency", d.intra_node_latency, false);
  number("inter_node_bandwidth", d.inter_node_bandwidth, true);
  number("inter_node_latency", d.inter_node_latency, false);
  number("reserved_bytes", d.reserved_bytes, false);
  number("attention_flops_per_second", d.attention_flops_per_second, false);
  number("kernel_seconds", d.kernel_seconds, false);
  number("gemm_min_rows", d.gemm_min_rows, false);
  if (j.contains("devices_per_node")) {
    d.devices_per_node = j.at("devices_per_node").get<int>();
    TESSERA_CHECK(d.devices_per_node > 0, "device field \"devices_per_node\"=", d.devices_per_node, ": must be positive");
  }
  if (j.contains("gemm_rates")) {
    d.gemm_rates.clear();
    for (const auto& r : j.at("gemm_rates"))
      d.gemm_rates.push_back({r.at("m").get<long long>(), r.at("n").get<long long>(), r.at("k").get<long long>(),
                              r.at("flops_per_second").get<double>()});
  }
  for (const char* key : {"peak_flops", "memory_bytes", "memory_bandwidth", "intra_node_bandwidth", "inter_node_bandwidth"})
    TESSERA_CHECK(j.contains(key) || j.contains("base"), "device: field \"", key,
                  "\" is missing (give it, or \"base\": a built-in device to start from)");
  TESSERA_CHECK(d.gemm_efficiency <= 1, "device field \"gemm_efficiency\"=", d.gemm_efficiency, ": must be at most 1");
  return d;
}

ClusterSpec read_cluster_file(const std::string& path) {
  std::ifstream in = open_input_file(path, "--cluster=" + path);
  ClusterSpec c;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    TESSERA_CHECK(j.contains("device"), "no \"device\" object");
    c.device = device_from_json(j.at("device"));
    if (j.contains("num_devices")) c.num_devices = j.at("num_devices").get<int>();
    TESSERA_CHECK(c.num_devices > 0, "\"num_devices\"=", c.num_devices, ": must be positive");
    if (j.contains("calibrated_for")) {
      c.calibrated_for = j.at("calibrated_for");
      TESSERA_CHECK(c.calibrated_for.is_object(), "\"calibrated_for\": expected an object");
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat("--cluster=", path, ": ", e.what()));
  } catch (const Error& e) {
    throw Error(str_cat("--cluster=", path, ": ", e.what()));
  }
  return c;
}

GroupLinks group_links(const DeviceSpec& d, int group, int stride) {
  const int per_node = d.devices_per_node;
  if (group <= 1) return {d.intra_node_bandwidth, 0, false};
  // Ranks r, r + stride, ...: they share a node when the whole span fits in one.
  const bool crosses = static_cast<long long>(group - 1) * stride + 1 > per_node;
  if (!crosses) return {d.intra_node_bandwidth, d.intra_node_latency, false};
  const int members_per_node = std::clamp(per_node / std::max(stride, 1), 1, group);
  return {std::min(d.intra_node_bandwidth, d.inter_node_bandwidth * members_per_node), d.inter_node_latency, true};
}

double all_reduce_seconds(const DeviceSpec& d, double bytes, int group, int stride) {
  if (group <= 1 || bytes <= 0) return 0;
  GroupLinks l = group_links(d, group, stride);
  return 2.0 * (group - 1) / group * bytes / l.bandwidth + 2.0 * (group - 1) * l.latency;
}

double all_gather_seconds(const DeviceSpec& d, double bytes, int group, int stride) {
  if (group <= 1 || bytes <= 0) return 0;
  GroupLinks l = group_links(d, group, stride);
  return static_cast<double>(group - 1) / group * bytes / l.bandwidth + (group - 1) * l.latency;
}

double reduce_scatter_seconds(const DeviceSpec& d, double bytes, int group, int stride) {
  return all_gather_seconds(d, bytes, group, stride);
}

double all_to_all_seconds(const DeviceSpec& d, double bytes, int group, int stride) {
  if (group <= 1 || bytes <= 0) return 0;
  const GroupLinks l = group_links(d, group, stride);
  if (!l.crosses_nodes) return static_cast<double>(group - 1) / group * bytes / l.bandwidth + (group - 1) * l.latency;
  const int same_node = std::clamp(d.devices_per_node / std::max(stride, 1), 1, group);  // this rank included
  const double local = static_cast<double>(same_node - 1) / group * bytes / d.intra_node_bandwidth;
  const double remote = static_cast<double>(group - same_node) / group * bytes / d.inter_node_bandwidth;
  return std::max(local, remote) + (group - 1) * l.latency;
}

double p2p_seconds(const DeviceSpec& d, double bytes, int stride) {
  if (bytes <= 0) return 0;
  const bool same_node = stride < d.devices_per_node;
  return same_node ? bytes / d.intra_node_bandwidth + d.intra_node_latency
                   : bytes / d.inter_node_bandwidth + d.inter_node_latency;
}

}  // namespace tessera::plan
