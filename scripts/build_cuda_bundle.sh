#!/usr/bin/env bash
# Builds what scripts/gpu_check.sh runs on the GPU machine, which has the CUDA toolkit but none of
# Tessera's Debian packages: the CUDA tests (every src/*/cuda/*_test.cc), the GPU benchmarks, `tessera`
# with Open MPI's plugins, and the shared libraries they load besides glibc and CUDA's own (libstdc++,
# libgomp, oneDNN for the CPU references, Open MPI, ...), into BUNDLE/bin and BUNDLE/lib. cuBLASLt is not carried: the device image has its own, found at run time.
#   scripts/build_cuda_bundle.sh [BUILD_DIR (build/release)] [BUNDLE (build/cuda-bundle)]
# Also packs it as BUNDLE.tar.gz (a third of the size: the device tool carries at most 64 MiB, and oneDNN
# alone is 40 MB). Then: run(command="bash scripts/gpu_check.sh", carry=["build/cuda-bundle.tar.gz"]).
# scripts/build_on_device.sh runs it on the GPU machine too (the fallback, where a bundle built here does
# not run there), with TESSERA_DEPS_PREFIX naming the unpacked prefix of scripts/pack_device_deps.sh: Open
# MPI's plugins come from there, and ldd looks there for the libraries the device does not have.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
bundle=${2:-$root/build/cuda-bundle}
deps=${TESSERA_DEPS_PREFIX:+$(realpath "$TESSERA_DEPS_PREFIX")}  # absolute: ldd prints the paths it was given
[ -f "$build/build.ninja" ] || { echo "build_cuda_bundle: $build is not a configured build (scripts/build.sh release)" >&2; exit 2; }
# cmake --build, its output kept in the build folder and its end shown when it fails.
build_targets() {
  cmake --build "$build" --target "$@" > "$build/cuda-bundle-build.log" 2>&1 ||
    { tail -40 "$build/cuda-bundle-build.log" >&2; echo "build_cuda_bundle: the build failed (log: $build/cuda-bundle-build.log)" >&2; exit 1; }
}

# The CUDA tests' targets: src/<layer>/cuda/<stem>.cc is <layer>_<stem> (CMakeLists.txt).
targets=()
for src in "$root"/src/*/cuda/*_test.cc; do
  [ -e "$src" ] || continue
  layer=$(basename "$(dirname "$(dirname "$src")")")
  targets+=("${layer}_$(basename "$src" .cc)")
done
# The GPU benchmarks too (bench_gpu_*: CMake makes them in a CUDA build).
for t in $(grep -oE '^build bench_gpu_[a-z_0-9]+:' "$build/build.ninja" | sed -E 's/^build ([^:]+):/\1/'); do targets+=("$t"); done
# And bench_collectives, whose --backend nccl measures the bus bandwidths `tessera plan` takes
# (scripts/gpu_layouts_check.sh runs it).
grep -qE '^build bench_collectives:' "$build/build.ninja" && targets+=(bench_collectives)
[ ${#targets[@]} -gt 0 ] || { echo "build_cuda_bundle: no CUDA tests under src/*/cuda/" >&2; exit 2; }
for t in "${targets[@]}"; do
  grep -qE "^build $t[ :]" "$build/build.ninja" ||
    { echo "build_cuda_bundle: $build has no target $t: configure it where CMake finds the CUDA toolkit" >&2; exit 2; }
done
# And the `tessera` binary itself, for `tessera train --device cuda`, with Open MPI's plugins (dlopen'd,
# so ldd does not list them): gpu_check.sh runs it as an isolated MPI singleton that loads them from here.
# One build of them all, so that a machine with many cores (the device's fallback) keeps them busy.
start=$SECONDS
build_targets "${targets[@]}" tessera
built=$((SECONDS - start))
mpi_plugins=$(dirname "$(find ${deps:+"$deps"} /usr/lib /usr/local/lib -name mca_ess_singleton.so 2>/dev/null | head -1)")
[ -f "$mpi_plugins/mca_ess_singleton.so" ] ||
  { echo "build_cuda_bundle: Open MPI's plugins (mca_ess_singleton.so) not found under ${deps:+$deps or }/usr/lib" >&2; exit 2; }

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
for t in "${targets[@]}"; do cp "$build/$t" "$bundle/bin/"; done
cp "$build/tessera" "$bundle/bin/"
# mpirun and orted, for scripts/gpu_layouts_check.sh's two ranks on one GPU (OPAL_PREFIX=BUNDLE there).
for tool in mpirun orted; do
  path=$(command -v "$tool" || true)
  [ -n "$path" ] && cp -L "$path" "$bundle/bin/$tool"
done
cp -rL "$mpi_plugins" "$bundle/lib/openmpi"
# Every library a binary or plugin loads, but glibc's (the device has a newer one) and CUDA's (the
# device's own matches its driver). One that ldd does not find would be missing on the device: an error.
for f in "${targets[@]/#/$build/}" "$build/tessera" "$bundle"/bin/mpirun "$bundle"/bin/orted "$bundle"/lib/openmpi/*.so; do
  [ -e "$f" ] || continue
  LD_LIBRARY_PATH="${deps:+$deps/lib/x86_64-linux-gnu:}${LD_LIBRARY_PATH:-}" ldd "$f"
done > "$bundle/ldd.txt"
if grep 'not found' "$bundle/ldd.txt" | sort -u | grep .; then
  echo "build_cuda_bundle: libraries not found (above)" >&2; exit 1
fi
awk '$3 ~ /^\// {print $3}' "$bundle/ldd.txt" | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*) continue ;;
  esac
  case $lib in /usr/local/cuda*) continue ;; esac
  cp -L "$lib" "$bundle/lib/"
done
rm "$bundle/ldd.txt"
tar -C "$bundle" -czf "$bundle.tar.gz" .
du -sh "$bundle" "$bundle.tar.gz" | paste -sd' ' | awk -v n=${#targets[@]} -v b=$built -v p=$((SECONDS - start - built)) '{print "build_cuda_bundle: " n " programs, tessera, Open MPI'"'"'s plugins and their libraries, " $1 " in " $2 ", packed " $3 " in " $4 " (build " b " s, bundle " p " s)"}'
