#!/usr/bin/env bash
# Set-up, build and every test: the command CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
# Every package the build and the tests use must come from setup.sh: a fresh machine has nothing else.
scripts/check_deps.sh build/release
# Tests run one at a time: each uses every core through OpenMP, and two at once would only fight.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
ctest --preset release --timeout 1200
