// Bandwidth of each collective through ProcessGroup against the raw MPI call of the same size, so
// that the cost of the abstraction (checks, the collective log, the Work handle) is measured rather
// than assumed. Four columns per size:
//   MPI        the blocking call (MPI_Allreduce, ...) on a duplicate of MPI_COMM_WORLD
//   MPI_I*     the non-blocking call + MPI_Wait, which is what ProcessGroup issues underneath; Open MPI
//              serves the two from different components (coll/tuned vs coll/libnbc), so a gap between
//              MPI and PG may be the algorithm, not the wrapper: PG/MPI_I* isolates the wrapper
//   PG         ProcessGroup's blocking form, with no collective timeout (the default: a plain MPI_Wait)
//   PG+timeout the same with set_collective_timeout(): wait() then polls MPI_Test and, after 64 polls,
//              sleeps between them (50..200 us) so that oversubscribed ranks leave the CPU to peers;
//              this is what `tessera train` runs with (--distributed-timeout-minutes is always set)
//
// Sizes follow NCCL-tests: the all-reduce / broadcast / all-to-all buffer, the all-gather output and
// the reduce-scatter input. algbw = size / time; busbw = algbw * 2(n-1)/n for all-reduce, (n-1)/n for
// all-gather, reduce-scatter and all-to-all, 1 for broadcast. A time is the slowest rank's mean over a
// batch of calls; the table shows the median over --reps batches, run interleaved (one batch of each
// column in turn) so that other load on the machine falls on all columns alike.
//
// Usage: mpirun -np 2 bench_collectives [--op all_reduce] [--reps N] [--min-bytes B] [--max-bytes B]
//
// --backend nccl (bench/collectives_nccl.h): the same collectives through NCCL's process group on GPU
// buffers instead, one GPU per rank, time, algbw and busbw only (nccl-tests' columns); --cluster-output
// FILE then writes the all-reduce's bus bandwidth as a cluster file's "nccl" object for tessera plan:
//   mpirun -np 8 bench_collectives --backend nccl --op all_reduce --cluster-output nccl.json
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/collectives_nccl.h"
#include "comm/bus_bandwidth.h"
#include "comm/mpi_process_group.h"
#include "core/check.h"
#include "core/timer.h"

namespace {

using tessera::Tensor;
using tessera::Timer;
using tessera::comm::ProcessGroup;

using Op = tessera::comm::BusCollective;
constexpr Op kOps[] = {Op::AllReduce, Op::AllGather, Op::ReduceScatter, Op::Broadcast, Op::AllToAll};

const char* op_name(Op op) { return tessera::comm::bus_collective_name(op); }
double bus_factor(Op op, int n) { return tessera::comm::bus_bandwidth_factor(op, n); }

// fp32 buffers for one size: `full` and `full2` hold the NCCL-tests size, `chunk` a 1/n share. Zeros,
// so that repeated in-place sums stay finite.
struct Buffers {
  Tensor full, full2, chunk;
  Buffers(int64_t elements, int n)
      : full(Tensor::zeros({elements})), full2(Tensor::zeros({elements})), chunk(Tensor::zeros({elements / n})) {}
  int count() const { return static_cast<int>(full.numel()); }
  int chunk_count() const { return static_cast<int>(chunk.numel()); }
};

void raw_blocking(Op op, Buffers& b, MPI_Comm comm) {
  switch (op) {
    case Op::AllReduce:
      MPI_Allreduce(MPI_IN_PLACE, b.full.raw(), b.count(), MPI_FLOAT, MPI_SUM, comm);
      break;
    case Op::AllGather:
      MPI_Allgather(b.chunk.raw(), b.chunk_count(), MPI_FLOAT, b.full.raw(), b.chunk_count(), MPI_FLOAT, comm);
      break;
    case Op::ReduceScatter:
      MPI_Reduce_scatter_block(b.full.raw(), b.chunk.raw(), b.chunk_count(), MPI_FLOAT, MPI_SUM, comm);
      break;
    case Op::Broadcast:
      MPI_Bcast(b.full.raw(), b.count(), MPI_FLOAT, 0, comm);
      break;
    case Op::AllToAll:
      MPI_Alltoall(b.full.raw(), b.chunk_count(), MPI_FLOAT, b.full2.raw(), b.chunk_count(), MPI_FLOAT, comm);
      break;
  }
}

void raw_nonblocking(Op op, Buffers& b, MPI_Comm comm) {
  MPI_Request r;
  switch (op) {
    case Op::AllReduce:
      MPI_Iallreduce(MPI_IN_PLACE, b.full.raw(), b.count(), MPI_FLOAT, MPI_SUM, comm, &r);
      break;
    case Op::AllGather:
      MPI_Iallgather(b.chunk.raw(), b.chunk_count(), MPI_FLOAT, b.full.raw(), b.chunk_count(), MPI_FLOAT, comm, &r);
      break;
    case Op::ReduceScatter:
      MPI_Ireduce_scatter_block(b.full.raw(), b.chunk.raw(), b.chunk_count(), MPI_FLOAT, MPI_SUM, comm, &r);
      break;
    case Op::Broadcast:
      MPI_Ibcast(b.full.raw(), b.count(), MPI_FLOAT, 0, comm, &r);
      break;
    case Op::AllToAll:
      MPI_Ialltoall(b.full.raw(), b.chunk_count(), MPI_FLOAT, b.full2.raw(), b.chunk_count(), MPI_FLOAT, comm, &r);
      break;
  }
  MPI_Wait(&r, MPI_STATUS_IGNORE);
}

void through_group(Op op, Buffers& b, ProcessGroup& pg) {
  switch (op) {
    case Op::AllReduce: pg.all_reduce(b.full); break;
    case Op::AllGather: pg.all_gather(b.chunk, b.full); break;
    case Op::ReduceScatter: pg.reduce_scatter(b.full, b.chunk); break;
    case Op::Broadcast: pg.broadcast(b.full, 0); break;
    case Op::AllToAll: pg.all_to_all(b.full, b.full2); break;
  }
}

// Seconds per call: the slowest rank's mean over `iters` calls, started together.
double time_batch(const std::function<void()>& call, int iters, MPI_Comm comm) {
  MPI_Barrier(comm);
  Timer t;
  for (int i = 0; i < iters; ++i) call();
  double s = t.seconds() / iters;
  MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, comm);
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Calls per batch: enough that a batch of small messages lasts milliseconds, at least 2 for large.
// A function of the size only, so that every rank makes the same number of calls.
int iterations(int64_t bytes) { return static_cast<int>(std::clamp<int64_t>((32 << 20) / bytes, 2, 1000)); }

std::string human(int64_t bytes) {
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

const char* arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::comm::MpiRuntime mpi(&argc, &argv);
  const int reps = std::atoi(arg(argc, argv, "--reps", "7"));
  const int64_t min_bytes = std::atoll(arg(argc, argv, "--min-bytes", "4096"));
  const int64_t max_bytes = std::atoll(arg(argc, argv, "--max-bytes", "67108864"));
  const std::string only = arg(argc, argv, "--op", "");  // one collective, by name; all by default
  const std::string backend = arg(argc, argv, "--backend", "mpi");
  const std::string cluster_output = arg(argc, argv, "--cluster-output", "");
  const bool root_rank = tessera::comm::make_mpi_world_group()->rank() == 0;
  try {
    TESSERA_CHECK(backend == "mpi" || backend == "nccl", "--backend=", backend, ": must be mpi or nccl");
    TESSERA_CHECK(backend == "nccl" || cluster_output.empty(), "--cluster-output=", cluster_output,
                  ": writes NCCL's bus bandwidths: give --backend nccl");
    if (!only.empty()) tessera::comm::parse_bus_collective(only, "--op");
    if (backend == "nccl") return bench::run_nccl_collectives({reps, min_bytes, max_bytes, only, cluster_output});
  } catch (const tessera::Error& e) {
    if (root_rank) std::fprintf(stderr, "bench_collectives: %s\n", e.what());
    return 1;
  }

  auto pg = tessera::comm::make_mpi_world_group();
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const int n = pg->size();
  const bool root = pg->rank() == 0;
  if (root) {
    const char* threads = std::getenv("OMP_NUM_THREADS");
    std::printf("# bench_collectives: %d ranks, OMP_NUM_THREADS=%s, median of %d batches, fp32 sum\n", n,
                threads ? threads : "unset", reps);
    std::printf("# times in us per call; busbw in GB/s (1e9 B/s); PG = ProcessGroup, no timeout unless noted\n");
  }

  using tessera::comm::set_collective_timeout;
  for (Op op : kOps) {
    if (!only.empty() && only != op_name(op)) continue;
    if (root) {
      std::printf("\n### %s (n=%d)\n\n", op_name(op), n);
      std::printf("| size | MPI | MPI_I* | PG | PG+timeout | busbw MPI | busbw PG | PG/MPI | PG/MPI_I* | PG+timeout/PG |\n");
      std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    }
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      // Whole elements, divisible by n (chunks of the gather/scatter/all-to-all).
      const int64_t elements = bytes / 4 / n * n;
      Buffers b(elements, n);
      const std::vector<std::function<void()>> columns = {
          [&] { raw_blocking(op, b, comm); },
          [&] { raw_nonblocking(op, b, comm); },
          [&] { through_group(op, b, *pg); },
          [&] {
            set_collective_timeout(std::chrono::seconds(600));
            through_group(op, b, *pg);
            set_collective_timeout(std::chrono::seconds(0));
          },
      };
      const int iters = iterations(bytes);
      std::vector<std::vector<double>> samples(columns.size());
      for (auto& c : columns) time_batch(c, iters, comm);  // warm-up: connections, first touch
      for (int r = 0; r < reps; ++r)
        for (size_t c = 0; c < columns.size(); ++c) samples[c].push_back(time_batch(columns[c], iters, comm));
      std::vector<double> t;
      for (auto& s : samples) t.push_back(median(s));
      const double size = static_cast<double>(elements) * 4;
      auto busbw = [&](double seconds) { return size / seconds * bus_factor(op, n) / 1e9; };
      if (root)
        std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", human(bytes).c_str(),
                    t[0] * 1e6, t[1] * 1e6, t[2] * 1e6, t[3] * 1e6, busbw(t[0]), busbw(t[2]), t[2] / t[0],
                    t[2] / t[1], t[3] / t[2]);
      std::fflush(stdout);
    }
  }
  MPI_Comm_free(&comm);
  return 0;
}
