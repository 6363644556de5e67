#include "bench/collectives_nccl.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "comm/bus_bandwidth.h"
#include "comm/mpi_process_group.h"
#include "core/check.h"
#include "core/file_io.h"
#include "core/timer.h"

#if defined(TESSERA_WITH_CUDA)
#include <cuda_runtime.h>

#include "comm/cuda/nccl_process_group.h"
#include "comm/device_collectives.h"
#include "comm/nccl_library.h"
#include "kernels/cuda/cuda_runtime.h"
#endif

namespace bench {

using tessera::Error;
using tessera::comm::BusCollective;

namespace {

// Where this rank sits: its rank among its node's ranks, the most ranks on one node, and the nodes.
struct Placement {
  int local_rank = 0, ranks_per_node = 1, nodes = 1;
};

Placement placement() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  Placement p;
  int local_size = 1, first = 0;
  MPI_Comm_rank(node, &p.local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  first = p.local_rank == 0 ? 1 : 0;
  MPI_Allreduce(&local_size, &p.ranks_per_node, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&first, &p.nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return p;
}

}  // namespace

#if defined(TESSERA_WITH_CUDA)

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

void run_one(BusCollective c, tessera::comm::ProcessGroup& pg, tessera::Tensor& full, tessera::Tensor& full2,
             tessera::Tensor& chunk) {
  switch (c) {
    case BusCollective::AllReduce: pg.all_reduce(full); break;
    case BusCollective::AllGather: pg.all_gather(chunk, full); break;
    case BusCollective::ReduceScatter: pg.reduce_scatter(full, chunk); break;
    case BusCollective::Broadcast: pg.broadcast(full, 0); break;
    case BusCollective::AllToAll: pg.all_to_all(full, full2); break;
  }
}

}  // namespace

int run_nccl_collectives(const NcclBenchOptions& o) {
  using namespace tessera;
  if (!o.only.empty()) comm::parse_bus_collective(o.only, "--op");
  const Placement where = placement();
  std::string why;
  const int gpus = cuda::device_count(&why);
  TESSERA_CHECK(gpus > 0, "--backend nccl: no CUDA device here (", why, ")");
  const int ordinal = where.local_rank % gpus;  // one GPU per rank of the node, as tessera train picks
  comm::NcclLibrary nccl;
  try {
    nccl = comm::load_nccl_library();
  } catch (const Error& e) {
    throw Error(str_cat("--backend nccl: ", e.what()));
  }
  auto world = comm::make_mpi_world_group();
  const int n = world->size();
  if (auto shared = comm::first_shared_device(*world, comm::cuda::device_key(ordinal)))
    throw Error(str_cat("--backend nccl: ranks ", shared->first, " and ", shared->second, " use one GPU (", gpus,
                        " GPU(s) for ", where.ranks_per_node, " ranks on a node), which NCCL refuses: run one rank per GPU"));
  TESSERA_CHECK(o.cluster_output.empty() || o.only.empty() || o.only == "all_reduce", "--cluster-output=",
                o.cluster_output, ": writes the all_reduce's bus bandwidth: leave out --op=", o.only);
  TESSERA_CHECK(o.cluster_output.empty() || n >= 2, "--cluster-output=", o.cluster_output,
                ": a bus bandwidth needs two or more ranks, one per GPU (this run has ", n, ")");
  cuda::register_device_allocators(0, ordinal);
  auto pg = comm::cuda::make_nccl_process_group(comm::make_mpi_world_group(), ordinal, nccl);
  const bool root = world->rank() == 0;
  if (root)
    std::printf("# bench_collectives --backend nccl: %d ranks on %d node(s), NCCL %s (%s), median of %d batches, "
                "fp32 sum\n# time in us per call; algbw and busbw in GB/s as nccl-tests defines them\n",
                n, where.nodes, comm::nccl_version_string(nccl.version).c_str(), nccl.path.c_str(), o.reps);
  const Device gpu{DeviceType::CUDA, ordinal};
  comm::NcclAllReduceMeasurement measured;
  measured.ranks = n, measured.nodes = where.nodes, measured.ranks_per_node = where.ranks_per_node;
  measured.nccl_version = comm::nccl_version_string(nccl.version);
  cudaDeviceProp prop{};
  measured.gpu = cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess ? prop.name : "a CUDA device";
  for (BusCollective c : {BusCollective::AllReduce, BusCollective::AllGather, BusCollective::ReduceScatter,
                          BusCollective::Broadcast, BusCollective::AllToAll}) {
    if (!o.only.empty() && o.only != comm::bus_collective_name(c)) continue;
    if (root)
      std::printf("\n### %s (n=%d, nccl)\n\n| size | time | algbw | busbw |\n|---:|---:|---:|---:|\n",
                  comm::bus_collective_name(c), n);
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
      const int64_t elements = std::max<int64_t>(bytes / 4 / n * n, n);
      Tensor full = Tensor::zeros({elements}, DType::F32, gpu), full2 = Tensor::zeros({elements}, DType::F32, gpu);
      Tensor chunk = Tensor::zeros({elements / n}, DType::F32, gpu);
      const int iters = static_cast<int>(std::clamp<int64_t>((256 << 20) / bytes, 5, 200));
      auto batch = [&] {
        MPI_Barrier(MPI_COMM_WORLD);
        Timer t;
        for (int i = 0; i < iters; ++i) run_one(c, *pg, full, full2, chunk);
        double s = t.seconds() / iters;  // each call returned when NCCL had finished it
        MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        return s;
      };
      batch();  // warm-up: NCCL's connections and buffers
      std::vector<double> samples;
      for (int r = 0; r < o.reps; ++r) samples.push_back(batch());
      const double seconds = median(samples), size = 4.0 * static_cast<double>(elements);
      const double busbw = comm::bus_bandwidth(c, n, size, seconds);
      if (root)
        std::printf("| %lld | %.1f | %.2f | %.2f |\n", static_cast<long long>(size), seconds * 1e6,
                    comm::algorithm_bandwidth(size, seconds) / 1e9, busbw / 1e9);
      std::fflush(stdout);
      if (c == BusCollective::AllReduce) {
        if (measured.small_bytes == 0) measured.small_bytes = static_cast<int64_t>(size), measured.small_seconds = seconds;
        measured.bytes = static_cast<int64_t>(size), measured.busbw = busbw;
      }
    }
  }
  if (!o.cluster_output.empty() && root) {
    write_file_atomically(o.cluster_output, comm::nccl_cluster_fragment(measured).dump(2) + "\n");
    std::printf("\nwrote %s (tessera plan --cluster %s)\n", o.cluster_output.c_str(), o.cluster_output.c_str());
  }
  return 0;
}

#else

int run_nccl_collectives(const NcclBenchOptions& o) {
  if (!o.only.empty()) tessera::comm::parse_bus_collective(o.only, "--op");
  placement();  // every rank reaches the refusal alike
  throw Error("--backend nccl: this bench_collectives was built without CUDA (no CUDA toolkit where it was built): "
              "use --backend mpi");
}

#endif

}  // namespace bench
