// The bus-bandwidth arithmetic against nccl-tests' definitions (doc/PERFORMANCE.md): the factors written
// out from the ring's traffic, and an all_reduce_perf row recomputed from its size and time.
#include "comm/bus_bandwidth.h"

#include <gtest/gtest.h>

#include "core/testing.h"

namespace tessera::comm {
namespace {

using ::tessera::testing::error_of;

TEST(BusBandwidth, FactorsAreNcclTests) {
  for (int n : {1, 2, 3, 8, 16}) {
    // A ring all-reduce moves 2(n-1) chunks of S/n through each rank's link; the gathers, scatters and
    // all-to-all (n-1) of them; a broadcast's pipeline the whole buffer once.
    const double chunks_all_reduce = 2.0 * (n - 1), chunks_gather = n - 1.0;
    EXPECT_DOUBLE_EQ(bus_bandwidth_factor(BusCollective::AllReduce, n), chunks_all_reduce / n) << n;
    EXPECT_DOUBLE_EQ(bus_bandwidth_factor(BusCollective::AllGather, n), chunks_gather / n) << n;
    EXPECT_DOUBLE_EQ(bus_bandwidth_factor(BusCollective::ReduceScatter, n), chunks_gather / n) << n;
    EXPECT_DOUBLE_EQ(bus_bandwidth_factor(BusCollective::AllToAll, n), chunks_gather / n) << n;
    EXPECT_DOUBLE_EQ(bus_bandwidth_factor(BusCollective::Broadcast, n), 1.0) << n;
  }
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(BusCollective::AllReduce, 8), 1.75);
}

TEST(BusBandwidth, AllReducePerfRow) {
  // 8 ranks, 128 MiB float all-reduce in 1000 us: algbw 134.2 GB/s, busbw 1.75 times that.
  const double bytes = 134217728, seconds = 1e-3;
  EXPECT_DOUBLE_EQ(algorithm_bandwidth(bytes, seconds), 134.217728e9);
  EXPECT_DOUBLE_EQ(bus_bandwidth(BusCollective::AllReduce, 8, bytes, seconds), 134.217728e9 * 1.75);
  // An all-gather of 16 ranks: S is the gathered output (16 shares).
  EXPECT_DOUBLE_EQ(bus_bandwidth(BusCollective::AllGather, 16, 16 * 4e6, 2e-3), 16 * 4e6 / 2e-3 * 15 / 16);
  EXPECT_EQ(bus_bandwidth(BusCollective::AllReduce, 1, bytes, seconds), 0);  // nothing crosses a link
  EXPECT_NE(error_of([] { algorithm_bandwidth(1, 0); }).find("must be positive"), std::string::npos);
}

TEST(BusBandwidth, Names) {
  for (const char* name : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"})
    EXPECT_STREQ(bus_collective_name(parse_bus_collective(name, "--op")), name);
  const std::string e = error_of([] { parse_bus_collective("allreduce", "--op"); });
  EXPECT_NE(e.find("--op=allreduce: not a collective"), std::string::npos) << e;
}

TEST(BusBandwidth, ClusterFragment) {
  NcclAllReduceMeasurement m;
  m.ranks = 8, m.nodes = 1, m.ranks_per_node = 8, m.bytes = 1 << 27, m.busbw = 350e9;
  m.small_bytes = 4096, m.small_seconds = 28e-6, m.nccl_version = "2.21.5", m.gpu = "H100";
  nlohmann::json j = nccl_cluster_fragment(m);
  EXPECT_DOUBLE_EQ(j["nccl"]["intra_node_busbw_gbps"].get<double>(), 350.0);
  EXPECT_DOUBLE_EQ(j["nccl"]["intra_node_latency_us"].get<double>(), 28.0 / 14);  // 2(n-1) ring steps
  EXPECT_FALSE(j["nccl"].contains("inter_node_busbw_gbps"));
  m.ranks = 16, m.nodes = 2;
  j = nccl_cluster_fragment(m);
  EXPECT_DOUBLE_EQ(j["nccl"]["inter_node_busbw_gbps"].get<double>(), 350.0);
  EXPECT_EQ(j["nccl"]["inter_node_ranks_per_node"].get<int>(), 8);
  EXPECT_DOUBLE_EQ(j["nccl"]["inter_node_latency_us"].get<double>(), 28.0 / 30);
  m.ranks = 1;
  const std::string e = error_of([&] { nccl_cluster_fragment(m); });
  EXPECT_NE(e.find("two or more ranks"), std::string::npos) << e;
}

}  // namespace
}  // namespace tessera::comm
