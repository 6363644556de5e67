# Pass/fail bookkeeping shared by the CLI test scripts in tests/ (sourced by them; not a test itself).
failures=0
passed=0

# check DESCRIPTION STATUS: a pass when STATUS is 0, else the description is printed. A description that
# runs a command ("$(tail "$log")") sets $? itself before STATUS is expanded, so save the status first:
#   grep -q x "$log"; ok=$?; check "x in the log: $(tail -3 "$log")" $ok
check() {
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); else echo "FAIL: $1"; failures=$((failures + 1)); fi
}

# expect_failure "TEXT" COMMAND...: COMMAND exits non-zero and its output contains TEXT.
expect_failure() {
  local text=$1 out rc
  shift
  out=$("$@" 2>&1)
  rc=$?
  [ $rc -ne 0 ] && grep -qF -- "$text" <<<"$out"
  check "$* -> expected a non-zero exit and '$text', got rc=$rc: $out" $?
}

finish() {  # finish NAME: prints the counts; succeeds when nothing failed
  echo "$1: $passed passed, $failures failed"
  [ "$failures" -eq 0 ]
}

skip() {  # skip REASON: this script cannot run here; CTest reports exit status 77 as skipped
  echo "SKIPPED: $1"
  exit 77
}

require_torch() {  # sets $python to Debian's python3-torch (fixtures written by PyTorch itself), or skips
  python=/usr/bin/python3
  "$python" -c 'import torch, numpy' >/dev/null 2>&1 || skip "$python cannot import torch and numpy (Debian's python3-torch)"
}
