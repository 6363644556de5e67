#!/usr/bin/env bash
# Configures and builds one CMake preset (default: release); further arguments go to the configure step
# (scripts/build.sh release -DCMAKE_CUDA_ARCHITECTURES=90a-real).
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
cmake --preset "$preset" "${@:2}" >/dev/null
cmake --build --preset "$preset"
