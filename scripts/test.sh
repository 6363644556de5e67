#!/usr/bin/env bash
# Set-up, build and every test: the command CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
# Every package the build and the tests use must come from setup.sh: a fresh machine has nothing else.
scripts/check_deps.sh build/release
# Each layer includes only the layers below it and its library links exactly those (docs/ARCHITECTURE.md).
python3 scripts/check_layers.py
# model/ reaches tensor memory only through kernel calls, dispatched on the tensor's device.
python3 scripts/check_device_seam.py
# Tests run one at a time: each uses every core through OpenMP, and two at once would only fight.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
ctest --preset release --timeout 1200
