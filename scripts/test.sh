#!/usr/bin/env bash
# Set-up, build and every test: the command CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The CUDA kernels for the GPUs the tests run on (Hopper) only: the compute_90 PTX that the default build
# adds for later GPUs is a second nvcc pass that takes ~40% of each kernel file's compile time.
scripts/build.sh release -DCMAKE_CUDA_ARCHITECTURES=90a-real
# Every package the build and the tests use must come from setup.sh: a fresh machine has nothing else.
scripts/check_deps.sh build/release
# Each layer includes only the layers below it and its library links exactly those (docs/ARCHITECTURE.md).
python3 scripts/check_layers.py
# model/ reaches tensor memory only through kernel calls, dispatched on the tensor's device.
python3 scripts/check_device_seam.py
# As many tests at once as there are cores: many wait on processes starting, servers answering or
# single-threaded work, so a second one fills the idle core. OpenMP workers that find no work sleep at
# once rather than spin, so that two tests' threads share the cores.
# (nproc reports OMP_NUM_THREADS when it is set: the cores are counted without it.)
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$cores} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
ctest --preset release --timeout 1200 -j "$cores"
