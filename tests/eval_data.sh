#!/usr/bin/env bash
# The evaluation data stored in data/eval is what data/eval/README.md describes: every file is listed in
# SHA256SUMS and has that checksum (a truncated checkout, a line-ending conversion or a Git LFS pointer
# fails here, naming the file, rather than as odd perplexities later).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=$root/data/eval
source "$(dirname "$0")/lib/checks.sh"

[ -f "$data/SHA256SUMS" ]
check "$data/SHA256SUMS exists" $?
for f in wiki.test.tokens wiki.valid.tokens lambada_test.jsonl; do
  grep -q "  $f\$" "$data/SHA256SUMS"
  check "$f is listed in $data/SHA256SUMS" $?
done
for path in "$data"/*; do
  f=$(basename "$path")
  case $f in README.md | SHA256SUMS) continue ;; esac
  expected=$(awk -v f="$f" '$2 == f { print $1 }' "$data/SHA256SUMS")
  got=$(sha256sum "$path" | cut -d' ' -f1)
  [ -n "$expected" ] && [ "$got" = "$expected" ]
  check "$path: sha256 $got, expected ${expected:-<not listed in SHA256SUMS>} (data/eval/README.md gives the provenance)" $?
done
finish eval_data
