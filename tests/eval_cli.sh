#!/usr/bin/env bash
# tessera eval end to end on the real data sets (data/eval, checked against data/eval/SHA256SUMS
# first): a small GPT-2-tokenizer model is trained on WikiText-103 validation text, then
# evaluated on the first lines of the WikiText-103 test set and the first LAMBADA passages. Checks
# Megatron's result lines and counts, and that tensor and data parallelism give the same results.
set -uo pipefail
tessera=${1:?usage: eval_cli.sh path/to/tessera}
root=$(cd "$(dirname "$0")/.." && pwd)
data=$root/data/eval
cache=${TESSERA_DATA_CACHE:-$root/data-cache}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
(cd "$data" && sha256sum --quiet -c SHA256SUMS) || {
  echo "FAIL: $data does not match $data/SHA256SUMS (see $data/README.md)"
  exit 1
}
export OMPI_MCA_mpi_yield_when_idle=1
mpi=(mpirun --oversubscribe --allow-run-as-root -np 2)
tokenizer=(--tokenizer-type GPT2BPETokenizer --vocab-file "$cache/gpt2/gpt2-vocab.json"
           --merge-file "$cache/gpt2/gpt2-merges.txt")

# Flags that need no model are checked before the checkpoint is loaded (a large one takes minutes).
expect_failure "--valid-data=$work/missing.txt: cannot open the file" "$tessera" eval --load "$work/no_checkpoint" \
  --task WIKITEXT103 --valid-data "$work/missing.txt"
expect_failure "--overlapping-eval=-1: must be >= 0" "$tessera" eval --load "$work/no_checkpoint" --task WIKITEXT103 \
  --valid-data "$data/wiki.test.tokens" --overlapping-eval -1

# A little training text: the first 600 lines of the validation set, one document per paragraph.
head -n 600 "$data/wiki.valid.tokens" | python3 -c '
import json, sys
for line in sys.stdin:
    if line.strip():
        print(json.dumps({"text": line}))' > "$work/train.jsonl"
"$tessera" preprocess --input "$work/train.jsonl" --output-prefix "$work/train" --append-eod "${tokenizer[@]}" \
  >/dev/null 2>&1
check "preprocess exits 0" $?
model=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64
       --data-path "$work/train_text_document" --split 100,0,0 --data-cache-path "$work/cache" "${tokenizer[@]}"
       --micro-batch-size 4 --global-batch-size 8 --train-iters 20 --lr 3e-3 --log-interval 10 --eval-iters 0
       --hidden-dropout 0 --attention-dropout 0 --seed 3)
"$tessera" train "${model[@]}" --save "$work/tp1" >"$work/train1.log" 2>&1  # 50257 pads to 50304
rc=$?
check "tp1 training exits 0: $(tail -3 "$work/train1.log")" $rc
OMP_NUM_THREADS=1 "${mpi[@]}" "$tessera" train "${model[@]}" --make-vocab-size-divisible-by 64 \
  --tensor-model-parallel-size 2 --save "$work/tp2" >"$work/train2.log" 2>&1
rc=$?
check "tp2 training exits 0: $(tail -3 "$work/train2.log")" $rc

head -n 120 "$data/wiki.test.tokens" > "$work/wiki.small.tokens"
head -n 40 "$data/lambada_test.jsonl" > "$work/lambada40.jsonl"
result() { grep -o "validation results on .*" <<<"$1"; }

# WIKITEXT103: Megatron's counts and line.
out=$("$tessera" eval --load "$work/tp1" --task WIKITEXT103 --valid-data "$work/wiki.small.tokens" 2>&1)
check "eval WIKITEXT103 exits 0: $out" $?
words=$(python3 -c 'import sys; print(len(open(sys.argv[1], encoding="utf-8").read().strip().split(" ")))' "$work/wiki.small.tokens")
grep -qF " > number of original tokens: $words, number of detokenized tokens: " <<<"$out"
check "number of original tokens is Python's len(text.strip().split(' ')) = $words: $out" $?
grep -qE "^ validation results on WIKITEXT103 \| avg loss: [0-9]\.[0-9]{4}E[+-][0-9]{2} \| ppl: [0-9]\.[0-9]{4}E[+-][0-9]{2} \| adjusted ppl: [0-9]\.[0-9]{4}E[+-][0-9]{2} \| token ratio: [0-9.]+ \|$" <<<"$out"
check "Megatron's WIKITEXT103 line: $out" $?
grep -qF "> working on iteration: 0/" <<<"$out" && grep -qF "time left" <<<"$out"
check "progress with time left: $out" $?
# ppl = exp(avg loss) and adjusted ppl = exp(avg loss x token ratio), from the printed numbers.
python3 - "$(result "$out")" <<'PY'
import math, re, sys
v = {k.strip(): x for k, x in re.findall(r"([a-z ]+): ([0-9.E+-]+)", sys.argv[1])}
loss, ppl, adj, ratio = (float(v[k]) for k in ("avg loss", "ppl", "adjusted ppl", "token ratio"))
ok = math.isclose(ppl, math.exp(loss), rel_tol=2e-4) and math.isclose(adj, math.exp(loss * ratio), rel_tol=2e-3) and ratio > 1
sys.exit(0 if ok else 1)
PY
rc=$?
check "ppl and adjusted ppl follow from the loss and the token ratio: $(result "$out")" $rc
overlap=$("$tessera" eval --load "$work/tp1" --task WIKITEXT103 --valid-data "$work/wiki.small.tokens" --overlapping-eval 16 2>&1)
check "--overlapping-eval 16 exits 0: $overlap" $?
[ "$(result "$out")" != "$(result "$overlap")" ]
rc=$?
check "overlapping windows change the loss: $(result "$out") / $(result "$overlap")" $rc

# LAMBADA, strict and not.
for mode in "" --strict-lambada; do
  out=$("$tessera" eval --load "$work/tp1" --task LAMBADA --valid-data "$work/lambada40.jsonl" $mode 2>&1)
  check "eval LAMBADA $mode exits 0: $out" $?
  grep -qE "^ validation results on LAMBADA \| number correct: [0-9]\.[0-9]{4}E[+-][0-9]{2} \| total examples: 4\.0000E\+01 \| avg accuracy: [0-9]\.[0-9]{4}E[+-][0-9]{2}$" <<<"$out"
  check "Megatron's LAMBADA line over 40 examples $mode: $out" $?
done

# Tensor parallelism: the same numbers (the loss up to rounding); data and pipeline parallelism: identical lines.
for task in "WIKITEXT103 $work/wiki.small.tokens" "LAMBADA $work/lambada40.jsonl"; do
  set -- $task
  one=$("$tessera" eval --load "$work/tp1" --task "$1" --valid-data "$2" --micro-batch-size 1 2>&1)
  tp=$(OMP_NUM_THREADS=1 "${mpi[@]}" "$tessera" eval --load "$work/tp2" --tensor-model-parallel-size 2 --task "$1" \
       --valid-data "$2" --micro-batch-size 1 2>&1)
  check "tp2 eval $1 exits 0: $tp" $?
  python3 - "$(result "$one")" "$(result "$tp")" <<'PY'
import math, re, sys
a, b = ({k.strip(): x for k, x in re.findall(r"([a-z ]+): ([0-9.E+-]+)", s)} for s in sys.argv[1:])
ok = a.keys() == b.keys() and len(a) > 0 and all(math.isclose(float(a[k]), float(b[k]), rel_tol=2e-3) for k in a)
if "number correct" in a:
    ok = ok and a["number correct"] == b["number correct"]
sys.exit(0 if ok else 1)
PY
  rc=$?
  check "tp2 $1 equals one process: $(result "$one") / $(result "$tp")" $rc
  dp=$(OMP_NUM_THREADS=1 "${mpi[@]}" "$tessera" eval --load "$work/tp1" --task "$1" --valid-data "$2" \
       --micro-batch-size 1 2>&1)
  check "dp2 eval $1 exits 0: $dp" $?
  [ -n "$(result "$one")" ] && [ "$(result "$one")" = "$(result "$dp")" ]
  rc=$?
  check "dp2 $1 is identical to one process: $(result "$one") / $(result "$dp")" $rc
  pp=$(OMP_NUM_THREADS=1 "${mpi[@]}" "$tessera" eval --load "$work/tp1" --pipeline-model-parallel-size 2 --task "$1" \
       --valid-data "$2" --micro-batch-size 1 2>&1)
  check "pp2 eval $1 exits 0: $pp" $?
  [ -n "$(result "$one")" ] && [ "$(result "$one")" = "$(result "$pp")" ]
  rc=$?
  check "pp2 $1 is identical to one process: $(result "$one") / $(result "$pp")" $rc
done

# Errors name the flag or the file.
out=$("$tessera" eval --load "$work/tp1" --task SQUAD --valid-data x 2>&1)
[ $? -ne 0 ] && grep -qF -- "--task" <<<"$out"
check "an unknown task names --task: $out" $?
out=$("$tessera" eval --load "$work/tp1" --task LAMBADA --valid-data "$work/missing.jsonl" 2>&1)
[ $? -ne 0 ] && grep -qF "missing.jsonl: cannot open" <<<"$out"
check "a missing data file is named: $out" $?
printf '{"text": "a b c"}\nnot json\n' > "$work/bad.jsonl"
out=$("$tessera" eval --load "$work/tp1" --task LAMBADA --valid-data "$work/bad.jsonl" 2>&1)
[ $? -ne 0 ] && grep -qF "bad.jsonl:2: not a JSON line" <<<"$out"
check "a malformed LAMBADA line is named by file:line: $out" $?
out=$("$tessera" eval --load "$work/tp1" --task WIKITEXT103 --valid-data "$work/wiki.small.tokens" --overlapping-eval 65 2>&1)
[ $? -ne 0 ] && grep -qF -- "--overlapping-eval=65" <<<"$out"
check "--overlapping-eval longer than the window is refused: $out" $?

finish eval_cli
