#!/usr/bin/env bash
# Smoke run of the libFuzzer targets of fuzz/ through scripts/fuzz.sh: each is built with clang and runs
# 2000 executions from its seed corpus without a crash, a sanitizer report or a broken invariant. The
# long runs (1,000,000 executions each, BENCHMARKS.md "Fuzzing") are not part of the suite. Skipped
# (exit 77) where clang is missing.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$(dirname "$0")/lib/checks.sh"
if ! command -v "${CLANGXX:-clang++}" >/dev/null; then
  echo "skipped: ${CLANGXX:-clang++} not found (scripts/setup.sh installs clang and libclang-rt-dev)"
  exit 77
fi

# A directory of its own, so that a long run in build/fuzz is not disturbed.
export TESSERA_FUZZ_DIR=$(mktemp -d)
trap 'rm -rf "$TESSERA_FUZZ_DIR"' EXIT

expect_failure "unknown target 'no_such_fuzzer'" "$root/scripts/fuzz.sh" 10 no_such_fuzzer
expect_failure "RUNS='many' must be a number" "$root/scripts/fuzz.sh" many

out=$(FUZZ_OPT="-O0 -g0" "$root/scripts/fuzz.sh" 2000 2>&1)
rc=$?
echo "$out" | grep -v '^fuzz.sh: building'
check "scripts/fuzz.sh 2000 exits 0 (rc=$rc)" $rc
targets=$(grep -o '^fuzz.sh: running [a-z0-9_]*' <<<"$out" | awk '{print $3}')
[ "$(wc -w <<<"$targets")" -ge 9 ]
ok=$?; check "fuzz.sh runs every target (ran: $(echo $targets))" $ok
for t in $targets; do
  grep -qE "^fuzz.sh: $t: (2000 executions.*no crash|skipped)" <<<"$out"
  check "$t: 2000 executions and no crash (or skipped, saying why)" $?
done
finish fuzz_cli
