#!/usr/bin/env bash
# Builds what scripts/gpu_check.sh runs on the GPU machine, which has the CUDA toolkit but none of
# Tessera's Debian packages: the CUDA tests (every src/*/cuda/*_test.cc), the GPU benchmarks, `tessera`
# with Open MPI's plugins, and the shared libraries they load besides glibc and CUDA's own (libstdc++,
# libgomp, oneDNN for the CPU references, Open MPI, ...), into BUNDLE/bin and BUNDLE/lib. cuBLASLt is not carried: the device image has its own, found at run time.
#   scripts/build_cuda_bundle.sh [BUILD_DIR (build/release)] [BUNDLE (build/cuda-bundle)]
# Also packs it as BUNDLE.tar.gz (a third of the size: the device tool carries at most 64 MiB, and oneDNN
# alone is 40 MB). Then: run(command="bash scripts/gpu_check.sh", carry=["build/cuda-bundle.tar.gz"]).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
bundle=${2:-$root/build/cuda-bundle}
[ -f "$build/build.ninja" ] || { echo "build_cuda_bundle: $build is not a configured build (scripts/build.sh release)" >&2; exit 2; }

# The CUDA tests' targets: src/<layer>/cuda/<stem>.cc is <layer>_<stem> (CMakeLists.txt).
targets=()
for src in "$root"/src/*/cuda/*_test.cc; do
  [ -e "$src" ] || continue
  layer=$(basename "$(dirname "$(dirname "$src")")")
  targets+=("${layer}_$(basename "$src" .cc)")
done
# The GPU benchmarks too (bench_gpu_*: CMake makes them in a CUDA build).
for t in $(grep -oE '^build bench_gpu_[a-z_0-9]+:' "$build/build.ninja" | sed -E 's/^build ([^:]+):/\1/'); do targets+=("$t"); done
[ ${#targets[@]} -gt 0 ] || { echo "build_cuda_bundle: no CUDA tests under src/*/cuda/" >&2; exit 2; }
for t in "${targets[@]}"; do
  grep -qE "^build $t[ :]" "$build/build.ninja" ||
    { echo "build_cuda_bundle: $build has no target $t: configure it where CMake finds the CUDA toolkit" >&2; exit 2; }
done
cmake --build "$build" --target "${targets[@]}" >/dev/null

# The `tessera` binary itself, for `tessera train --device cuda`, with Open MPI's plugins (dlopen'd, so
# ldd does not list them): gpu_check.sh runs it as an isolated MPI singleton that loads them from here.
cmake --build "$build" --target tessera >/dev/null
mpi_plugins=$(dirname "$(find /usr/lib /usr/local/lib -name mca_ess_singleton.so 2>/dev/null | head -1)")
[ -f "$mpi_plugins/mca_ess_singleton.so" ] ||
  { echo "build_cuda_bundle: Open MPI's plugins (mca_ess_singleton.so) not found under /usr/lib" >&2; exit 2; }

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
for t in "${targets[@]}"; do cp "$build/$t" "$bundle/bin/"; done
cp "$build/tessera" "$bundle/bin/"
cp -rL "$mpi_plugins" "$bundle/lib/openmpi"
# Every library a binary or plugin loads, but glibc's (the device has a newer one) and CUDA's (the
# device's own matches its driver).
for f in "${targets[@]/#/$build/}" "$build/tessera" "$bundle"/lib/openmpi/*.so; do
  ldd "$f" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*) continue ;;
  esac
  case $lib in /usr/local/cuda*) continue ;; esac
  cp -L "$lib" "$bundle/lib/"
done
tar -C "$bundle" -czf "$bundle.tar.gz" .
du -sh "$bundle" "$bundle.tar.gz" | paste -sd' ' | awk -v n=${#targets[@]} '{print "build_cuda_bundle: " n " programs, tessera, Open MPI'"'"'s plugins and their libraries, " $1 " in " $2 ", packed " $3 " in " $4}'
