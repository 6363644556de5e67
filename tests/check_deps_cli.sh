#!/usr/bin/env bash
# The dependency guard (scripts/check_deps.sh) on this build: it passes with setup.sh's list, and fails,
# naming the package, a file that needed it and the setup.sh line to extend, when a package the build
# or the tests need is removed from the list (the OpenCL package that a fresh machine once lacked, a
# header-only library, a tool the tests run by name, a Python module).
set -uo pipefail
tessera=${1:?usage: check_deps_cli.sh path/to/tessera}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$(dirname "$tessera")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
guard="$root/scripts/check_deps.sh"

out=$("$guard" "$build" 2>&1)
check "the guard passes with setup.sh's list: $out" $?
grep -q "^check_deps: OK" <<<"$out"
check "the guard says OK: $out" $?

# without PACKAGE, the guard fails and names it, a file it provides and setup.sh's packages line
without() {
  local pkg=$1 file=$2 out rc
  "$root/scripts/setup.sh" --list | grep -vx "$pkg" > "$work/list"
  out=$("$guard" --packages "$work/list" "$build" 2>&1)
  rc=$?
  [ $rc -ne 0 ] && grep -q "FAIL: package $pkg is used .*$file.*add \`$pkg\` to packages=( at scripts/setup.sh:[0-9]" <<<"$out"
  check "without $pkg: expected a failure naming $pkg and $file, got rc=$rc: $out" $?
}
without ocl-icd-opencl-dev libOpenCL.so   # CMake's OpenCL_LIBRARY, for oneDNN's CMake package
without libcli11-dev /usr/include/CLI/    # headers only: seen in the compiler's dependency info
without curl /usr/bin/curl                # run by name in tests/serve_cli.sh
without python3-torch torch               # imported by tests/hf_reference.py (numpy would not do: torch needs it)

# A Recommends that --no-install-recommends drops is named as the cause.
"$root/scripts/setup.sh" --list | grep -vx ocl-icd-opencl-dev > "$work/list"
out=$("$guard" --packages "$work/list" "$build" 2>&1)
grep -q "libdnnl-dev only recommends it" <<<"$out"
check "the guard says libdnnl-dev only recommends ocl-icd-opencl-dev" $?

expect_failure "usage: scripts/check_deps.sh" "$guard" "$work"
finish check_deps_cli
