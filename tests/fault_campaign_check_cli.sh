#!/usr/bin/env bash
# The fault campaign's checker (bench/fault_campaign_check.py, issue 58 item 6) can fail: it accepts a
# whole checkpoint and finds the newest of the persistent and non-persistent ones, and it refuses a tracker
# naming a checkpoint with a file cut short, a file missing, a safetensors header that does not account
# for its file, or no index (a save killed before it was finalised).
set -uo pipefail
tessera=${1:?usage: fault_campaign_check_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
bench=$(cd "$(dirname "$0")/../bench" && pwd)
export OMP_NUM_THREADS=1
unset TESSERA_INJECT_FAULT TESSERA_CKPT_WRITE_DELAY_MS
"$tessera" train --num-layers 1 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data \
  --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 \
  --eval-iters 0 --train-iters 3 --save "$work/c" --save-interval 2 --non-persistent-save-interval 1 \
  --non-persistent-ckpt-type global >"$work/train.log" 2>&1
check "the run that saves: $(tail -2 "$work/train.log")" $?
# newest DIR: "ITERATION KIND" or the error.
newest() {
  python3 -c "import sys; sys.path.insert(0, '$bench'); import fault_campaign_check as c, os
try:
    it, where = c.newest('$1', 'global', '$1/non_persistent', '', 1); print(it, os.path.basename(where))
except Exception as e:
    print('refused:', type(e).__name__, e)"
}
out=$(newest "$work/c")
[ "$out" = "3 c" ]
check "whole checkpoints: the newest is the persistent one of iteration 3: $out" $?
rm -r "$work/c/iter_0000003" && echo 3 >"$work/c/latest_checkpointed_iteration.txt"
out=$(newest "$work/c")
[[ $out == "refused: FileNotFoundError"*"iter_0000003/index.json"* ]]
check "a tracker naming a directory without its index is refused: $out" $?
echo 2 >"$work/c/latest_checkpointed_iteration.txt"
out=$(newest "$work/c")
[ "$out" = "2 c" ] && [ "$(cat "$work/c/non_persistent/latest_checkpointed_iteration.txt")" = 1 ]
check "the persistent checkpoint of 2 is newer than the non-persistent one of 1: $out" $?
cp -r "$work/c" "$work/saved"
# safetensors DIR: the first weights file of DIR's checkpoint of iteration 2.
weights() { ls "$1"/iter_0000002/*.safetensors | head -1; }
truncate -s -4 "$(weights "$work/c")"
out=$(newest "$work/c")
[[ $out == "refused: ValueError"*"bytes, the index records"* ]]
check "a file cut short is refused: $out" $?
rm -rf "$work/c" && cp -r "$work/saved" "$work/c" && rm "$(weights "$work/c")"
out=$(newest "$work/c")
[[ $out == "refused: FileNotFoundError"* ]]
check "a missing file is refused: $out" $?
# A header whose offsets run past the data, with the index's size made to match: only the header check sees it.
rm -rf "$work/c" && cp -r "$work/saved" "$work/c"
f=$(weights "$work/c")
head -c "$(( $(stat -c %s "$f") - 4 ))" "$f" >"$f.cut" && mv "$f.cut" "$f"
python3 - "$work/c/iter_0000002/index.json" "$(basename "$f")" "$(stat -c %s "$f")" <<'EOF'
import json, sys
index = json.load(open(sys.argv[1])); index["files"][sys.argv[2]]["bytes"] = int(sys.argv[3])
json.dump(index, open(sys.argv[1], "w"))
EOF
out=$(newest "$work/c")
[[ $out == "refused: ValueError"*"header accounts for"* ]]
check "a safetensors header that does not account for its file is refused: $out" $?

finish fault_campaign_check_cli
