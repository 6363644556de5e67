// A GPU cluster calibrated from measurements (issue 56): NCCL bus bandwidths and a measured one-GPU step
// in cluster files change the planner's predictions as the formulas say, each number recomputed here from
// the entered measurement (the ring formula of cluster.h, Megatron's FLOPs count written out), not taken
// from the code under test; bad fields are refused naming the file and the field.
#include "plan/measured_calibration.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "comm/bus_bandwidth.h"
#include "core/testing.h"
#include "plan/cluster_files.h"
#include "plan/planner.h"

namespace tessera::plan {
namespace {

using ::tessera::testing::error_of;
namespace fs = std::filesystem;

// Cluster files in a folder of the test's own, removed at the end.
class ClusterFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("measured_calibration_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const nlohmann::json& j) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << j.dump();
    return path;
  }
  fs::path dir_;
};

// GPT-2 124M as bench_gpu_train runs it, at micro-batch 8.
nlohmann::json gpt2_step() {
  return {{"num_layers", 12}, {"hidden_size", 768}, {"num_attention_heads", 12}, {"seq_length", 1024},
          {"padded_vocab_size", 50304}, {"micro_batch_size", 8}, {"precision", "bf16"}, {"source", "test"}};
}

// Megatron's FLOPs of one iteration of a dense GPT with ffn = 4h, written out: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
double gpt2_flops() {
  const double B = 8, s = 1024, l = 12, h = 768, V = 50304;
  return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
}

TEST_F(ClusterFiles, NcclBusBandwidthsReplaceTheLinks) {
  const std::string path = write("nccl.json", {{"device", {{"base", "H100-SXM"}}},
                                               {"nccl",
                                                {{"intra_node_busbw_gbps", 300},
                                                 {"intra_node_latency_us", 5},
                                                 {"inter_node_busbw_gbps", 160},
                                                 {"inter_node_ranks_per_node", 8},
                                                 {"inter_node_latency_us", 12}}}});
  const CalibratedCluster c = read_cluster_files({path}, "A100-80GB");
  const DeviceSpec& d = c.cluster.device;
  EXPECT_EQ(d.name, "H100-SXM");
  EXPECT_EQ(c.notes.size(), 2u);
  const double bytes = 1e9;
  // Eight GPUs of one node: a ring at the intra-node busbw, 2(n-1) steps of its latency.
  EXPECT_NEAR(all_reduce_seconds(d, bytes, 8, 1), 2.0 * 7 / 8 * bytes / 300e9 + 14 * 5e-6, 1e-15);
  // Sixteen over two nodes, all eight GPUs of each in the ring: the measured inter-node busbw itself.
  EXPECT_NEAR(all_reduce_seconds(d, bytes, 16, 1), 2.0 * 15 / 16 * bytes / 160e9 + 30 * 12e-6, 1e-15);
  // A data-parallel group of stride 8 (tp 8): one GPU per node in the ring, at its 1/8 share of the NICs.
  EXPECT_NEAR(all_reduce_seconds(d, bytes, 16, 8), 2.0 * 15 / 16 * bytes / 20e9 + 30 * 12e-6, 1e-15);
  // Against the table's H100 (360 GB/s in a node) the intra-node all-reduce is slower by 360/300 in its
  // bandwidth term.
  const DeviceSpec table = find_device("H100-SXM");
  EXPECT_NEAR((all_reduce_seconds(d, bytes, 8, 1) - 14 * 5e-6) / (all_reduce_seconds(table, bytes, 8, 1) - 14 * table.intra_node_latency),
              360.0 / 300, 1e-12);
}

TEST_F(ClusterFiles, FragmentsMergeWithTheDeviceFlagOrAFile) {
  // A fragment alone takes --device's entry; inter_node_ranks_per_node defaults to its devices per node.
  const std::string nccl = write("nccl.json", {{"nccl", {{"inter_node_busbw_gbps", 400}}}});
  CalibratedCluster c = read_cluster_files({nccl}, "H100-SXM");
  EXPECT_EQ(c.cluster.device.name, "H100-SXM");
  EXPECT_DOUBLE_EQ(c.cluster.device.inter_node_bandwidth, 400e9 / 8);
  EXPECT_FALSE(c.num_devices_given);
  // After a file with a device and a count; later "nccl" fields override earlier ones.
  const std::string base = write("base.json", {{"device", {{"base", "A100-80GB"}, {"devices_per_node", 4}}},
                                               {"num_devices", 32},
                                               {"nccl", {{"intra_node_busbw_gbps", 100}, {"inter_node_busbw_gbps", 50}}}});
  c = read_cluster_files({base, nccl}, "H100-SXM");
  EXPECT_EQ(c.cluster.device.name, "A100-80GB");
  EXPECT_EQ(c.cluster.num_devices, 32);
  EXPECT_TRUE(c.num_devices_given);
  EXPECT_DOUBLE_EQ(c.cluster.device.intra_node_bandwidth, 100e9);
  EXPECT_DOUBLE_EQ(c.cluster.device.inter_node_bandwidth, 400e9 / 4);
}

TEST_F(ClusterFiles, BenchCollectivesFragmentIsRead) {
  comm::NcclAllReduceMeasurement m;
  m.ranks = 8, m.nodes = 1, m.ranks_per_node = 8, m.bytes = 1 << 26, m.busbw = 287.5e9;
  m.small_bytes = 4096, m.small_seconds = 21e-6;
  const std::string path = write("bench.json", comm::nccl_cluster_fragment(m));
  const DeviceSpec d = read_cluster_files({path}, "H200").cluster.device;
  EXPECT_DOUBLE_EQ(d.intra_node_bandwidth, 287.5e9);
  EXPECT_NEAR(d.intra_node_latency, 21e-6 / 14, 1e-18);
}

TEST_F(ClusterFiles, MeasuredThroughputFitsTheEfficiency) {
  nlohmann::json step = gpt2_step();
  step["throughput_per_gpu_tflops"] = 150;
  const std::string path = write("step.json", {{"measured_step", step}});
  const CalibratedCluster c = read_cluster_files({path}, "H100-SXM");
  const DeviceSpec& d = c.cluster.device;
  EXPECT_GT(d.gemm_efficiency, 0);
  EXPECT_LE(d.gemm_efficiency, 1);
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("GEMM efficiency"), std::string::npos) << c.notes[0];
  // The plan of the measured run on the fitted device takes the measured time: Megatron's FLOPs / 150 TFLOP/s.
  const MeasuredStep s = measured_step_from_json(step);
  const Plan p = make_plan(s.model, s.layout, ClusterSpec{d, 1}, {});
  EXPECT_NEAR(p.time.total(), gpt2_flops() / 150e12, 1e-9 * p.time.total());
  EXPECT_NEAR(p.tflops_per_device, 150, 1e-6);
  // A higher measured throughput fits a higher efficiency and a faster plan of another layout.
  step["throughput_per_gpu_tflops"] = 200;
  const DeviceSpec faster = fit_gemm_efficiency(find_device("H100-SXM"), measured_step_from_json(step));
  EXPECT_GT(faster.gemm_efficiency, d.gemm_efficiency);
  Layout two = s.layout;
  two.dp = 2, two.global_batch_size = 16;
  EXPECT_LT(make_plan(s.model, two, ClusterSpec{faster, 2}, {}).time.compute,
            make_plan(s.model, two, ClusterSpec{d, 2}, {}).time.compute);
}

TEST_F(ClusterFiles, MeasuredIterationTimeFitsTheEfficiency) {
  nlohmann::json step = gpt2_step();
  step["elapsed_time_per_iteration_ms"] = 150;
  const DeviceSpec d = read_cluster_files({write("step.json", {{"measured_step", step}})}, "H100-SXM").cluster.device;
  const MeasuredStep s = measured_step_from_json(step);
  EXPECT_NEAR(make_plan(s.model, s.layout, ClusterSpec{d, 1}, {}).time.total(), 0.150, 1e-9);
  // The flag form (this model, its micro-batch) is the same measurement.
  const MeasuredStep flag = measured_step_of_run(s.model, s.layout, 150, 0);
  EXPECT_DOUBLE_EQ(fit_gemm_efficiency(find_device("H100-SXM"), flag).gemm_efficiency, d.gemm_efficiency);
  EXPECT_DOUBLE_EQ(measured_step_of_run(s.model, s.layout, 0, 250).seconds, gpt2_flops() / 250e12);
}

TEST_F(ClusterFiles, BadFieldsAreRefusedByName) {
  auto refusal = [&](const nlohmann::json& j) {
    const std::string path = write("bad.json", j);
    const std::string e = error_of([&] { read_cluster_files({path}, "H100-SXM"); });
    EXPECT_NE(e.find("--cluster=" + path), std::string::npos) << e;
    return e;
  };
  EXPECT_NE(refusal({{"nccl", {{"intra_node_busbw", 300}}}}).find("\"nccl\" field \"intra_node_busbw\": unknown"),
            std::string::npos);
  EXPECT_NE(refusal({{"nccl", {{"intra_node_busbw_gbps", -3}}}}).find("\"intra_node_busbw_gbps\"=-3: must be positive"),
            std::string::npos);
  EXPECT_NE(refusal({{"nccl", {{"inter_node_busbw_gbps", "fast"}}}}).find("expected a number"), std::string::npos);
  EXPECT_NE(refusal({{"ncl", {}}}).find("field \"ncl\": unknown"), std::string::npos);
  nlohmann::json step = gpt2_step();
  step.erase("hidden_size");
  step["throughput_per_gpu_tflops"] = 300;
  EXPECT_NE(refusal({{"measured_step", step}}).find("\"measured_step\": field \"hidden_size\" is missing"), std::string::npos);
  step = gpt2_step();
  EXPECT_NE(refusal({{"measured_step", step}}).find("give one of \"elapsed_time_per_iteration_ms\""), std::string::npos);
  step["throughput_per_gpu_tflops"] = 300;
  step["precision"] = "fp8";
  EXPECT_NE(refusal({{"measured_step", step}}).find("\"precision\"=fp8"), std::string::npos);
  step["precision"] = "bf16";
  step["throughput_per_gpu_tflops"] = 5000;  // more than H100's 989 TFLOP/s peak
  EXPECT_NE(refusal({{"measured_step", step}}).find("faster than the planner's"), std::string::npos);
}

}  // namespace
}  // namespace tessera::plan
