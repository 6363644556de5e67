// Algorithm and bus bandwidth of a collective as NCCL's own benchmarks (nccl-tests, doc/PERFORMANCE.md)
// define them, so that a number from bench_collectives reads like an all_reduce_perf column and can be
// entered where a cluster file takes one (tessera plan --cluster, docs/planning.md):
//   algbw = S / t, S the operation's size: the buffer of an all-reduce, broadcast or all-to-all, the
//           gathered output of an all-gather, the input of a reduce-scatter (n times a rank's share);
//   busbw = algbw * factor, the factor making a ring's per-link traffic comparable across rank counts:
//           all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast 1.
// At one rank every factor but broadcast's is 0: nothing crosses a link, and nccl-tests prints 0 too.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera::comm {

enum class BusCollective { AllReduce, AllGather, ReduceScatter, Broadcast, AllToAll };

// "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all" (bench_collectives' --op).
const char* bus_collective_name(BusCollective c);
// The collective of one of those names; anything else is an Error naming `flag` and the names.
BusCollective parse_bus_collective(const std::string& name, const std::string& flag);

double bus_bandwidth_factor(BusCollective c, int ranks);
double algorithm_bandwidth(double bytes, double seconds);  // bytes/s
double bus_bandwidth(BusCollective c, int ranks, double bytes, double seconds);  // bytes/s

// An all-reduce measured over NCCL by bench_collectives --backend nccl, for a cluster file.
struct NcclAllReduceMeasurement {
  int ranks = 0;           // the world
  int nodes = 1;           // distinct nodes among them
  int ranks_per_node = 0;  // on the most crowded node
  int64_t bytes = 0;       // the largest buffer, whose bus bandwidth is the link's
  double busbw = 0;        // bytes/s at `bytes`
  int64_t small_bytes = 0;     // the smallest buffer, whose time is mostly the ring's steps
  double small_seconds = 0;    // its time per call
  std::string nccl_version;    // "2.21.5"
  std::string gpu;             // the device's name
};

// The cluster file's "nccl" object for the measurement (docs/planning.md, "Calibrating a GPU cluster"):
// within one node intra_node_busbw_gbps and intra_node_latency_us; across nodes inter_node_busbw_gbps,
// inter_node_ranks_per_node and inter_node_latency_us. The latency is the small buffer's time over the
// ring's 2(n-1) steps. "measured_with" records the run. An Error for fewer than two ranks (no bus
// bandwidth at one).
nlohmann::json nccl_cluster_fragment(const NcclAllReduceMeasurement& m);

}  // namespace tessera::comm
