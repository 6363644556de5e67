// Mixture-of-experts token dispatch through parallel::ExpertDispatch (the alltoall and allgather
// dispatchers of src/parallel/expert_dispatch.h) against the raw MPI_Alltoallv of the same bytes, so
// that the cost of the dispatcher (the count exchange, the copies into and out of the exchange
// buffers, the regrouping) is measured rather than assumed. Expert parallelism over all ranks, expert
// tensor parallelism 1 (each expert whole on its rank), as `--expert-model-parallel-size N` with
// tensor parallelism 1.
//
// Each rank routes --rows rows of --hidden fp32 values to --experts experts, the counts drawn from a
// fixed seed with a mild imbalance (expert e gets a share proportional to 1 + 0.5 * sin(e + rank));
// the same counts on every run. Per size, the columns are (microseconds per step, the slowest rank's
// mean over a batch, median over --reps batches run interleaved):
//   MPI          MPI_Alltoallv there and back (dispatch then combine) with the counts, preplanned
//   plan         the ExpertDispatch constructor alone (its all-gather of the counts)
//   a2a          ExpertDispatch (alltoall) plan + dispatch + combine: what one MoE layer's forward does
//   a2a/MPI      the dispatcher's time over the raw calls'
//   ag           the same with the allgather dispatcher (every rank's rows all-gathered, the outputs
//                reduce-scattered back)
// GB/s is the bytes a rank sends there and back (2 x rows x hidden x 4, counting the part that stays on
// the rank, as NCCL-tests' algbw does) over the time.
//
// Usage: mpirun -np 2 bench_moe_dispatch [--experts 8] [--hidden 1024] [--reps 7] [--rows 8192]
//        (without --rows: 1024, 4096 and 16384 rows)
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <vector>

#include "expert_counts.h"
#include "comm/mpi_process_group.h"
#include "comm/process_group.h"
#include "core/timer.h"
#include "parallel/expert_dispatch.h"

namespace {

using tessera::Tensor;
using tessera::Timer;
using tessera::parallel::ExpertDispatch;
using tessera::parallel::ExpertParallelContext;
using tessera::parallel::TokenDispatcher;

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

const char* arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::comm::MpiRuntime mpi(&argc, &argv);
  const int reps = std::atoi(arg(argc, argv, "--reps", "7"));
  const int experts = std::atoi(arg(argc, argv, "--experts", "8"));
  const int64_t hidden = std::atoll(arg(argc, argv, "--hidden", "1024"));
  const int64_t only_rows = std::atoll(arg(argc, argv, "--rows", "0"));

  auto world = tessera::comm::make_mpi_world_group();
  auto single = tessera::comm::make_single_process_group("expert-tensor");
  auto world2 = tessera::comm::make_mpi_world_group();  // etp x ep = ep (etp 1)
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const int n = world->size(), rank = world->rank();
  if (experts % n != 0) {
    if (rank == 0) std::fprintf(stderr, "bench_moe_dispatch: %d experts do not split over %d ranks\n", experts, n);
    return 2;
  }
  ExpertParallelContext a2a{world.get(), single.get(), world2.get(), TokenDispatcher::AllToAll};
  ExpertParallelContext ag{world.get(), single.get(), world2.get(), TokenDispatcher::AllGather};
  if (rank == 0) {
    const char* threads = std::getenv("OMP_NUM_THREADS");
    std::printf("# bench_moe_dispatch: ep %d (etp 1), %d experts, hidden %lld fp32, OMP_NUM_THREADS=%s, median of %d batches\n",
                n, experts, static_cast<long long>(hidden), threads ? threads : "unset", reps);
    std::printf("# us per dispatch+combine; GB/s = 2 x rows x hidden x 4 B / time (per rank)\n\n");
    std::printf("| rows per rank | MiB per rank | MPI_Alltoallv x2 | plan | a2a dispatcher | ag dispatcher | GB/s MPI | GB/s a2a | GB/s ag | a2a/MPI | ag/MPI |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  std::vector<int64_t> sizes = only_rows > 0 ? std::vector<int64_t>{only_rows} : std::vector<int64_t>{1024, 4096, 16384};
  for (int64_t rows : sizes) {
    const std::vector<int64_t> counts = imbalanced_expert_counts(rows, experts, rank);
    Tensor in = Tensor::zeros({rows, hidden});
    // The raw exchange's plan, made once outside the timing: rows to each rank and from each rank.
    const int local = experts / n;
    std::vector<int64_t> all(static_cast<size_t>(experts) * n);
    MPI_Allgather(counts.data(), experts, MPI_INT64_T, all.data(), experts, MPI_INT64_T, comm);
    std::vector<int> sc(n), rc(n), sd(n), rd(n);
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < local; ++j) {
        sc[r] += static_cast<int>(counts[r * local + j] * hidden);
        rc[r] += static_cast<int>(all[static_cast<size_t>(r) * experts + rank * local + j] * hidden);
      }
    for (int r = 1; r < n; ++r) sd[r] = sd[r - 1] + sc[r - 1], rd[r] = rd[r - 1] + rc[r - 1];
    const int64_t received = std::accumulate(rc.begin(), rc.end(), int64_t{0});
    Tensor mid = Tensor::zeros({received / hidden, hidden}), back = Tensor::zeros({rows, hidden});
    const std::vector<std::function<void()>> columns = {
        [&] {
          MPI_Alltoallv(in.raw(), sc.data(), sd.data(), MPI_FLOAT, mid.raw(), rc.data(), rd.data(), MPI_FLOAT, comm);
          MPI_Alltoallv(mid.raw(), rc.data(), rd.data(), MPI_FLOAT, back.raw(), sc.data(), sd.data(), MPI_FLOAT, comm);
        },
        [&] { ExpertDispatch plan(a2a, counts); },
        [&] {
          ExpertDispatch d(a2a, counts);
          Tensor out = d.combine(d.dispatch(in));
        },
        [&] {
          ExpertDispatch d(ag, counts);
          Tensor out = d.combine(d.dispatch(in));
        },
    };
    const double bytes = 2.0 * static_cast<double>(rows) * hidden * 4;
    const int iters = static_cast<int>(std::clamp<double>((256 << 20) / bytes, 3, 200));
    std::vector<std::vector<double>> samples(columns.size());
    for (auto& c : columns) time_batch(c, iters, comm);  // warm-up
    for (int r = 0; r < reps; ++r)
      for (size_t c = 0; c < columns.size(); ++c) samples[c].push_back(time_batch(columns[c], iters, comm));
    std::vector<double> t;
    for (auto& s : samples) t.push_back(median(s));
    if (rank == 0)
      std::printf("| %lld | %.1f | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                  static_cast<long long>(rows), bytes / 2 / (1 << 20), t[0] * 1e6, t[1] * 1e6, t[2] * 1e6,
                  t[3] * 1e6, bytes / t[0] / 1e9, bytes / t[2] / 1e9, bytes / t[3] / 1e9, t[2] / t[0], t[3] / t[0]);
    std::fflush(stdout);
  }
  MPI_Comm_free(&comm);
  return 0;
}
