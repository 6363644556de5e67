#!/usr/bin/env bash
# The fallback of the device check (issue 39, item 7): builds on the GPU machine the bundle that
# scripts/build_cuda_bundle.sh builds here, for when one built here will not run there (an instruction
# -march=native chose for this CPU, a toolkit or driver mismatch, ...). That machine has the CUDA toolkit,
# gcc, CMake and ninja but none of Tessera's Debian packages: they come packed by
# scripts/pack_device_deps.sh. Unpacks them beside the archive, configures BUILD_DIR with the CUDA backend
# on and every dependency found there (PREFIX/deps.cmake), then runs build_cuda_bundle.sh on it, which
# builds the CUDA tests, the GPU benchmarks and `tessera` on all cores and lays out build/cuda-bundle as
# it does here, so that scripts/gpu_check.sh runs unchanged after it. Prints each phase's time.
#   bash scripts/build_on_device.sh [DEPS (build/device-deps.tar.gz)] [BUILD_DIR (build/device)] [CMAKE_ARGS...]
# (BUILD_ON_DEVICE_CONFIGURE_ONLY=1 stops after configuring.)
# From a development machine: scripts/pack_device_deps.sh, then the device tool's
#   run(command="bash scripts/build_on_device.sh && bash scripts/gpu_check.sh",
#       carry=["build/device-deps.tar.gz"], timeout_s=600).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Absolute paths: the build's RUNPATH and ldd's answers, which build_cuda_bundle.sh reads, hold them.
deps=$(realpath -m "${1:-$root/build/device-deps.tar.gz}")
build=$(realpath -m "${2:-$root/build/device}")
shift $(($# < 2 ? $# : 2))
prefix=${deps%.tar.gz}
[ -f "$deps" ] || { echo "build_on_device: no $deps (scripts/pack_device_deps.sh packs it)" >&2; exit 2; }
start=$SECONDS
phase() { echo "build_on_device: $1 in $((SECONDS - start)) s"; start=$SECONDS; }

rm -rf "$prefix" && mkdir -p "$prefix" && tar -C "$prefix" -xzf "$deps"
phase "unpacked $deps"

# Another compiler than CI's (the device's gcc) may warn where gcc 12 does not: no -Werror. The tests are
# listed when CTest runs, not after each link (gtest_discover_tests would run each test binary at build
# time, which loads libraries from the prefix that the loader does not look in).
cmake -S "$root" -B "$build" -G Ninja -C "$prefix/deps.cmake" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="-O3 -DNDEBUG" -DTESSERA_CUDA=ON -DTESSERA_WERROR=OFF \
  -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST "$@" > "$build.configure.log" 2>&1 ||
  { tail -40 "$build.configure.log" >&2; echo "build_on_device: configure failed (log: $build.configure.log)" >&2; exit 1; }
grep -E '^-- (Tessera|The (CXX|CUDA) compiler identification)' "$build.configure.log" || true
phase "configured $build"
# tests/device_deps_cli.sh checks the steps up to here on a development machine.
[ "${BUILD_ON_DEVICE_CONFIGURE_ONLY:-0}" = 1 ] && exit 0

CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} TESSERA_DEPS_PREFIX=$prefix \
  "$root/scripts/build_cuda_bundle.sh" "$build"
phase "built and bundled"
