#!/usr/bin/env bash
# CTest's launcher for the *_mpi_test binaries (their CROSSCOMPILING_EMULATOR, see CMakeLists.txt):
#   mpirun_np.sh MPIEXEC BINARY ARGS...  runs BINARY under MPIEXEC at $TESSERA_MPI_NP ranks.
# Each GoogleTest test is its own CTest entry per world size, so a test that cannot run at a size
# (GTEST_SKIP: "needs two ranks") is reported by CTest as skipped, with its reason, instead of hiding
# inside a passing entry. Test discovery runs with TESSERA_MPI_NP unset: one rank.
set -euo pipefail
# Ranks share the cores of a small machine: one thread each, yielding when idle.
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_rmaps_base_oversubscribe=1
mpiexec=$1
shift
exec "$mpiexec" --oversubscribe --allow-run-as-root -np "${TESSERA_MPI_NP:-1}" "$@"
