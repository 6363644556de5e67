#!/usr/bin/env bash
# `tessera samples` as a user runs it: train's flags in, Megatron's fields out (JSON lines or a listing),
# --first/--count windows that agree, --decode, blends and splits, and flag errors that name the flag,
# the value and the rule. That the samples are the trainer's is src/train/training_data_test.cc.
set -uo pipefail
tessera=${1:?usage: samples_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"

# Two small corpora of NullTokenizer text (ids separated by spaces).
for part in a b; do
  for d in $(seq 1 30); do
    ids=$(for i in $(seq 0 $((10 + d % 20))); do printf '%d ' $(( (d * 3 + i * (d % 4 + 1) + ${#part}) % 50 )); done)
    printf '{"text": "%s"}\n' "$ids"
  done > "$work/$part.jsonl"
  "$tessera" preprocess --input "$work/$part.jsonl" --output-prefix "$work/$part" --append-eod \
    --tokenizer-type NullTokenizer --vocab-size 60 >/dev/null 2>&1
  check "preprocess $part" $?
done

train=(--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2
       --global-batch-size 4 --lr 1e-3 --train-iters 5 --eval-iters 1 --tokenizer-type NullTokenizer
       --vocab-size 60 --split 90,10,0 --data-cache-path "$work/cache")

out=$("$tessera" samples "${train[@]}" --data-path "$work/a_text_document" --count 4 --output "$work/four.jsonl" 2>&1)
check "samples --count 4 --output: $out" $?
python3 - "$work/four.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 4, len(lines)
for s in lines:
    assert list(s) == ["tokens", "labels", "loss_mask", "position_ids"], list(s)
    assert all(len(s[k]) == 16 for k in s), s
    assert s["labels"][:-1] == s["tokens"][1:], s        # labels are the next tokens
    assert s["position_ids"] == list(range(16)), s
PY
check "GPT samples: Megatron's fields, labels the next tokens" $?

"$tessera" samples "${train[@]}" --data-path "$work/a_text_document" --first 2 --count 2 --output "$work/last2.jsonl"
check "samples --first 2 --count 2" $?
tail -2 "$work/four.jsonl" | cmp -s - "$work/last2.jsonl"
check "--first 2 --count 2 gives samples 2 and 3 of --count 4: $(cat "$work/last2.jsonl")" $?

"$tessera" samples "${train[@]}" --data-path "$work/a_text_document" --count 1 --decode --output "$work/dec.jsonl"
python3 -c 'import json,sys; s=json.loads(open(sys.argv[1]).readline()); assert list(s)[:2]==["tokens","tokens_decoded"] and s["tokens_decoded"].split()==[str(t) for t in s["tokens"]], s' \
  "$work/dec.jsonl"
check "--decode: tokens_decoded beside tokens: $(cat "$work/dec.jsonl")" $?

out=$("$tessera" samples "${train[@]}" --data-path "$work/a_text_document" --count 2 --decode 2>&1)
ok=$?; grep -q "^train sample 1:" <<<"$out" && grep -q "^  loss_mask:" <<<"$out" && grep -q "^  decoded:" <<<"$out"
check "a listing on standard output without --output ($ok): $out" $?

out=$("$tessera" samples "${train[@]}" --data-path 0.3 "$work/a_text_document" 0.7 "$work/b_text_document" \
      --split valid --count 2 2>&1)
ok=$?; grep -q "^valid sample 1:" <<<"$out"; check "a blend's validation split ($ok): $out" $?

out=$("$tessera" samples "${train[@]}" --mock-data --model-family bert --count 3 --output "$work/bert.jsonl" 2>&1)
check "BERT samples of mock data: $out" $?
python3 - "$work/bert.jsonl" <<'PY'
import json, sys
for s in map(json.loads, open(sys.argv[1])):
    assert list(s) == ["text", "types", "labels", "is_random", "padding_mask", "loss_mask", "truncated"], list(s)
    assert all((l == -1) == (m == 0) for l, m in zip(s["labels"], s["loss_mask"])), s
    assert sum(s["loss_mask"]) > 0 and s["is_random"] in (0, 1), s
PY
check "BERT samples: Megatron's fields, labels -1 where not predicted" $?

gpt=("${train[@]}" --data-path "$work/a_text_document")
expect_failure "--count=0: must be at least 1" "$tessera" samples "${gpt[@]}" --count 0
expect_failure "--first=x: must be an integer" "$tessera" samples "${gpt[@]}" --first x
expect_failure "--first=-1: must be at least 0" "$tessera" samples "${gpt[@]}" --first=-1
expect_failure "run past the train split's" "$tessera" samples "${gpt[@]}" --first 1000000
# --first near 2^63: first + count overflowed and the error came from the dataset's own bounds check.
expect_failure "--count=2: samples from --first=9223372036854775807 run past the train split's" "$tessera" samples \
  "${gpt[@]}" --first 9223372036854775807 --count 2
expect_failure "--split=test: the test split has no documents" "$tessera" samples "${gpt[@]}" --split test
expect_failure "--output: needs a value" "$tessera" samples "${gpt[@]}" --output
expect_failure "--output=$work/no/such/dir/x.jsonl: cannot create" \
  "$tessera" samples "${gpt[@]}" --output "$work/no/such/dir/x.jsonl"
expect_failure "--mask-prob=1.5: must be in (0, 1)" "$tessera" samples "${train[@]}" --mock-data --model-family bert \
  --mask-prob 1.5
out=$("$tessera" samples --help 2>&1); check "samples --help: $out" $?
finish samples_cli
