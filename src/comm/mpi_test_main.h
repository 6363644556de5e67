// main() for the *_mpi_test binaries, which mpirun starts once per rank. Include it from exactly one
// .cc of the binary (the test file itself).
//
// Every rank runs every test. Rank 0 prints GoogleTest's usual output; the other ranks print only
// their failures ("rank R: failure in Suite.Test at file:line"), so one line per test stays readable
// at any world size while nothing that goes wrong is hidden. All ranks exit with the same status.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>

#include "comm/mpi_process_group.h"

namespace tessera::comm::mpi_test {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  void OnTestStart(const ::testing::TestInfo& info) override {
    test_ = str_cat(info.test_suite_name(), ".", info.name());
  }

  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::string message = str_cat("rank ", rank_, ": failure in ", test_, " at ",
                                  result.file_name() ? result.file_name() : "?", ":", result.line_number(), "\n",
                                  result.message(), "\n");
    std::fputs(message.c_str(), stderr);
    std::fflush(stderr);
  }

 private:
  int rank_;
  std::string test_;
};

}  // namespace tessera::comm::mpi_test

int main(int argc, char** argv) {
  tessera::comm::MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new tessera::comm::mpi_test::RankFailurePrinter(rank));
  }
  // A test that fails on one rank can leave the others waiting in a collective for ever; end the job
  // with the forensics instead. Generous: ranks share few cores in CI.
  tessera::comm::set_collective_timeout(std::chrono::seconds(300));

  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int failed_ranks = 0;
  MPI_Allreduce(&failed, &failed_ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && failed_ranks > 0) {
    std::fprintf(stderr, "%d of %d ranks had failures\n", failed_ranks, size);
  }
  return failed_ranks > 0 ? 1 : 0;
}
