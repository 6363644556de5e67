#!/usr/bin/env bash
# The device check's bundle (scripts/build_cuda_bundle.sh) holds everything the CUDA tests load but
# glibc and CUDA's own libraries: each bundled test, run with the bundle's libraries first on the
# search path, loads no other library (the loader's log says which it loads). scripts/gpu_check.sh runs them
# and prints its summary last; on a machine without a GPU it reports the device tests skipped with
# CUDA's reason and exits 0. Skipped where the build has no CUDA backend (no toolkit found).
set -uo pipefail
tessera=${1:?usage: cuda_bundle_cli.sh path/to/tessera}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/tests/lib/checks.sh"
build=$(cd "$(dirname "$tessera")" && pwd)
[ -x "$build/kernels_cuda_runtime_test" ] || skip "this build has no CUDA backend (CMake found no CUDA toolkit)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

out=$("$root/scripts/build_cuda_bundle.sh" "$build" "$work/bundle" 2>&1); ok=$?
check "build_cuda_bundle.sh builds the bundle: $out" $ok
! ls "$work/bundle/lib" | grep -qE 'libcudart|libcublas'; ok=$?
check "CUDA's libraries are not carried (the device's own are used): $(ls "$work/bundle/lib")" $ok

# Each bundled test loads, besides glibc and CUDA's own libraries, only what the bundle holds (the
# loader's log of the libraries it initialises, with the bundle first on the search path).
for bin in "$work"/bundle/bin/*_test; do
  LD_LIBRARY_PATH="$work/bundle/lib" LD_DEBUG=libs "$bin" --gtest_brief=1 >/dev/null 2>"$work/loader.txt"; ok=$?
  check "$(basename "$bin") runs from the bundle: $(tail -3 "$work/loader.txt")" $ok
  outside=$(grep -oE 'calling init: \S+' "$work/loader.txt" | awk '{print $3}' | sort -u |
            grep -vE "^$work/bundle/lib/|/(libc|libm|libdl|librt|libpthread)\.so|/ld-linux|/cuda[^/]*/")
  [ -z "$outside" ]; ok=$?
  check "$(basename "$bin") loads nothing from outside the bundle but glibc and CUDA: $outside" $ok
done

out=$(env -i PATH=/usr/bin:/bin HOME="$work" OUT="$work/out" bash "$root/scripts/gpu_check.sh" "$work/bundle" 2>&1); ok=$?
check "gpu_check.sh passes (exit $ok): $(tail -8 <<<"$out")" $ok
# Last: the summary's heading, and after it no step's output (a step's starts with "=== "), however many
# test programs the bundle holds.
summary=$(sed -n '/^=== gpu_check summary/,$p' <<<"$out")
[ -n "$summary" ] && ! tail -n +2 <<<"$summary" | grep -q '^=== '; ok=$?
check "gpu_check.sh prints its summary last: $(tail -8 <<<"$out")" $ok
for bin in "$work"/bundle/bin/*_test; do
  name=$(basename "$bin")
  grep -qE "^$name +rc=0 " <<<"$out"; ok=$?
  check "the summary has a passing line for $name: $(tail -6 <<<"$out")" $ok
  [ -f "$work/out/$name.xml" ]; ok=$?
  check "gpu_check.sh writes $name.xml" $ok
done
# The packed bundle (what the device tool carries, being under its 64 MiB) runs the same, unpacked beside it.
[ -f "$work/bundle.tar.gz" ]; ok=$?
check "build_cuda_bundle.sh packs the bundle as bundle.tar.gz" $ok
mv "$work/bundle" "$work/unpacked"
out_packed=$(env -i PATH=/usr/bin:/bin HOME="$work" OUT="$work/out2" bash "$root/scripts/gpu_check.sh" "$work/bundle.tar.gz" 2>&1); ok=$?
check "gpu_check.sh runs the packed bundle (exit $ok): $(tail -4 <<<"$out_packed")" $ok
[ "$(grep -c ' rc=0 ' <<<"$out_packed")" = "$(grep -c ' rc=0 ' <<<"$out")" ]; ok=$?
check "the packed bundle runs the same steps: $(tail -4 <<<"$out_packed")" $ok
if ! command -v nvidia-smi >/dev/null; then
  grep -q '^no GPU here: the device tests were skipped (no CUDA device' <<<"$out"; ok=$?
  check "without a GPU the summary says the device tests were skipped, and why: $(tail -4 <<<"$out")" $ok
fi
finish cuda_bundle_cli
