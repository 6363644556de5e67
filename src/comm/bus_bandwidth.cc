#include "comm/bus_bandwidth.h"

#include "core/check.h"

namespace tessera::comm {

namespace {
constexpr BusCollective kAll[] = {BusCollective::AllReduce, BusCollective::AllGather, BusCollective::ReduceScatter,
                                  BusCollective::Broadcast, BusCollective::AllToAll};
}  // namespace

const char* bus_collective_name(BusCollective c) {
  switch (c) {
    case BusCollective::AllReduce: return "all_reduce";
    case BusCollective::AllGather: return "all_gather";
    case BusCollective::ReduceScatter: return "reduce_scatter";
    case BusCollective::Broadcast: return "broadcast";
    case BusCollective::AllToAll: return "all_to_all";
  }
  return "?";
}

BusCollective parse_bus_collective(const std::string& name, const std::string& flag) {
  std::string names;
  for (BusCollective c : kAll) {
    if (name == bus_collective_name(c)) return c;
    names += std::string(names.empty() ? "" : ", ") + bus_collective_name(c);
  }
  throw Error(str_cat(flag, "=", name, ": not a collective (one of ", names, ")"));
}

double bus_bandwidth_factor(BusCollective c, int ranks) {
  TESSERA_CHECK(ranks > 0, "bus bandwidth of ", bus_collective_name(c), " over ", ranks, " ranks: need at least one");
  const double n = ranks;
  switch (c) {
    case BusCollective::AllReduce: return 2 * (n - 1) / n;
    case BusCollective::Broadcast: return 1;
    default: return (n - 1) / n;
  }
}

double algorithm_bandwidth(double bytes, double seconds) {
  TESSERA_CHECK(seconds > 0, "algorithm bandwidth of ", bytes, " bytes in ", seconds, " s: the time must be positive");
  return bytes / seconds;
}

double bus_bandwidth(BusCollective c, int ranks, double bytes, double seconds) {
  return algorithm_bandwidth(bytes, seconds) * bus_bandwidth_factor(c, ranks);
}

nlohmann::json nccl_cluster_fragment(const NcclAllReduceMeasurement& m) {
  TESSERA_CHECK(m.ranks >= 2, "a bus bandwidth needs two or more ranks (this run had ", m.ranks,
                "): run one rank per GPU, e.g. mpirun -np 8 on a node of 8 GPUs");
  TESSERA_CHECK(m.busbw > 0 && m.small_seconds > 0, "an NCCL measurement without a bandwidth or a time");
  const bool across = m.nodes > 1;
  const std::string where = across ? "inter_node" : "intra_node";
  nlohmann::json nccl = {
      {where + "_busbw_gbps", m.busbw / 1e9},
      {where + "_latency_us", m.small_seconds / (2.0 * (m.ranks - 1)) * 1e6},
      {"measured_with",
       {{"collective", "all_reduce"}, {"ranks", m.ranks}, {"nodes", m.nodes}, {"ranks_per_node", m.ranks_per_node},
        {"bytes", m.bytes}, {"small_bytes", m.small_bytes}, {"nccl_version", m.nccl_version}, {"gpu", m.gpu}}}};
  if (across) nccl["inter_node_ranks_per_node"] = m.ranks_per_node;
  return {{"nccl", nccl}};
}

}  // namespace tessera::comm
