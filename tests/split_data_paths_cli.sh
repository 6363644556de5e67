#!/usr/bin/env bash
# --train-data-path, --valid-data-path, --test-data-path (Megatron's blend_per_split): each split's samples
# come from its own blend and the whole of each of its datasets. Checked against an independent
# construction: a split of the per-split paths gives exactly the samples of `--data-path <same blend>
# --split 100,0,0` asked for the same number of samples (its train split is the whole of each dataset,
# drawn with the same seed). Then a run that trains and evaluates with them, and the refusals.
set -uo pipefail
tessera=${1:?usage: split_data_paths_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"

# Three small corpora of NullTokenizer text, different in content and length.
for part in a bb ccc; do
  for d in $(seq 1 24); do
    ids=$(for i in $(seq 0 $((8 + (d * ${#part}) % 17))); do
      printf '%d ' $(( (d * 7 + i * (d % 5 + ${#part}) + 11 * ${#part}) % 50 )); done)
    printf '{"text": "%s"}\n' "$ids"
  done > "$work/$part.jsonl"
  "$tessera" preprocess --input "$work/$part.jsonl" --output-prefix "$work/$part" --append-eod \
    --tokenizer-type NullTokenizer --vocab-size 60 >/dev/null 2>&1
  check "preprocess $part" $?
done
A=$work/a_text_document B=$work/bb_text_document C=$work/ccc_text_document

# gbs 4: train 4 iterations = 16 samples; validation (4 / 2 + 1) * 2 * 4 = 24; test 2 * 4 = 8.
base=(--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2
      --global-batch-size 4 --lr 1e-3 --tokenizer-type NullTokenizer --vocab-size 60)
per=("${base[@]}" --train-iters 4 --eval-interval 2 --eval-iters 2 --data-cache-path "$work/cache_per")
# The reference: only a train split, over all documents, asked for N samples (--train-iters N / 4).
ref() { local n=$1; shift; "$tessera" samples "${base[@]}" --train-iters $((n / 4)) --split 100,0,0 \
          --data-cache-path "$work/cache_ref" --data-path "$@" --count "$n" --output "$work/ref.jsonl"; }
per_split() { local which=$1 n=$2; shift 2; "$tessera" samples "${per[@]}" "$@" --split "$which" --count "$n" \
                --output "$work/per.jsonl"; }
same() { cmp -s "$work/per.jsonl" "$work/ref.jsonl"; }

# (1) One dataset per split: train from A, valid from B, test from C.
paths=(--train-data-path "$A" --valid-data-path "$B" --test-data-path "$C")
per_split train 16 "${paths[@]}"; check "per-split train samples" $?
ref 16 "$A"; same; check "--train-data-path A: the samples of --data-path A --split 100,0,0" $?
per_split valid 24 "${paths[@]}"; check "per-split valid samples" $?
ref 24 "$B"; same; check "--valid-data-path B: the samples of --data-path B --split 100,0,0" $?
ref 24 "$A"; ! same; check "(the valid samples are not A's)" $?
per_split test 8 "${paths[@]}"; check "per-split test samples" $?
ref 8 "$C"; same; check "--test-data-path C: the samples of --data-path C --split 100,0,0" $?

# (2) Weighted blends per split, and an unweighted list; a single weighted prefix is that dataset alone.
blends=(--train-data-path 0.3 "$A" 0.7 "$B" --valid-data-path 2 "$B" 1 "$C" --test-data-path "$A" "$C")
per_split train 16 "${blends[@]}"; check "per-split weighted train samples" $?
ref 16 0.3 "$A" 0.7 "$B"; same; check "--train-data-path 0.3 A 0.7 B: as --data-path 0.3 A 0.7 B" $?
per_split valid 24 "${blends[@]}"; check "per-split weighted valid samples" $?
ref 24 2 "$B" 1 "$C"; same; check "--valid-data-path 2 B 1 C: as --data-path 2 B 1 C" $?
ref 24 1 "$B" 2 "$C"; ! same; check "(not as the other weights)" $?
per_split test 8 "${blends[@]}"; check "per-split unweighted list test samples" $?
ref 8 "$A" "$C"; same; check "--test-data-path A C: as --data-path A C" $?
per_split valid 24 --train-data-path "$A" --valid-data-path 0.5 "$C"; check "single weighted valid prefix" $?
ref 24 "$C"; same; check "--valid-data-path 0.5 C: C's own samples" $?
# ... its dataset itself (whole epochs, past the 24 asked for), not a blend of exactly 24.
"$tessera" samples "${per[@]}" --train-data-path "$A" --valid-data-path 0.5 "$C" --split valid --first 24 >/dev/null
check "--valid-data-path 0.5 C is C's dataset, not a blend of one" $?

# BERT (pretrain_bert's flags): the same builder over sentence-split datasets of a WordPiece vocabulary.
root=$(cd "$(dirname "$0")/.." && pwd)
python3 - "$root/README.md" "$work" <<'PY'
import json, sys
docs = [" ".join(p.split()) for p in open(sys.argv[1]).read().split("\n\n")]
docs = [d for d in docs if d.count(". ") >= 1 and not d.startswith(("|", "```", "#"))][:120]
open(sys.argv[2] + "/bert.txt", "w").write("\n".join(docs) + "\n")
for name, part in (("bert_a", docs[0::2]), ("bert_b", docs[1::2])):
    with open(f"{sys.argv[2]}/{name}.jsonl", "w") as f:
        for d in part: f.write(json.dumps({"text": d}) + "\n")
PY
"$tessera" tokenizer train --model-type wordpiece --input "$work/bert.txt" --model-prefix "$work/wp" \
  --vocab-size 800 >/dev/null 2>&1
check "wordpiece vocabulary" $?
tok=(--tokenizer-type BertWordPieceLowerCase --vocab-file "$work/wp-vocab.txt")
for part in bert_a bert_b; do
  "$tessera" preprocess --input "$work/$part.jsonl" --output-prefix "$work/$part" "${tok[@]}" --split-sentences \
    >/dev/null 2>&1
  check "preprocess $part --split-sentences" $?
done
bert=(--model-family bert "${tok[@]}" --seq-length 32 --num-layers 1 --hidden-size 16 --num-attention-heads 2
      --micro-batch-size 2 --global-batch-size 4 --lr 1e-3)
"$tessera" samples "${bert[@]}" --train-iters 4 --eval-interval 2 --eval-iters 2 --data-cache-path "$work/cache_per" \
  --train-data-path "$work/bert_a_text_sentence" --valid-data-path "$work/bert_b_text_sentence" --split valid \
  --count 24 --output "$work/per.jsonl"
check "BERT per-split valid samples" $?
"$tessera" samples "${bert[@]}" --train-iters 6 --split 100,0,0 --data-cache-path "$work/cache_ref" \
  --data-path "$work/bert_b_text_sentence" --count 24 --output "$work/ref.jsonl"
check "BERT reference samples" $?
same; check "BERT --valid-data-path B: the samples of --data-path B --split 100,0,0" $?
[ "$(wc -l <"$work/per.jsonl")" -eq 24 ] && grep -q '"text"' "$work/per.jsonl"; check "24 BERT samples" $?
"$tessera" samples "${bert[@]}" --train-iters 6 --split 100,0,0 --data-cache-path "$work/cache_ref" \
  --data-path "$work/bert_a_text_sentence" --count 24 --output "$work/ref.jsonl"
! same; check "(the BERT valid samples are not A's)" $?

# (3) Training evaluates on --valid-data-path, and the test split after training.
log=$("$tessera" train "${per[@]}" --train-data-path "$A" --valid-data-path "$B" --test-data-path "$C" \
      --log-interval 1 2>&1)
ok=$?; grep -q "validation loss at iteration 2 | lm loss value" <<<"$log" &&
  grep -q "validation loss at iteration 4 on test set" <<<"$log" &&
  grep -q "validation samples, .* test samples (--train-data-path, --valid-data-path, --test-data-path)" <<<"$log"
check "train with per-split paths logs validation and test losses ($ok): $log" $?
log=$("$tessera" train "${per[@]}" --train-data-path "$A" 2>&1)
ok=$?; [ $ok -eq 0 ] && grep -q "WARNING: no --valid-data-path; evaluation is off" <<<"$log" &&
  ! grep -q "validation loss" <<<"$log"
check "without --valid-data-path: no validation, said in the log ($ok): $log" $?
log=$("$tessera" train "${per[@]}" --valid-data-path "$B" --skip-train 2>&1)
ok=$?; grep -q "validation loss at iteration 0 on validation set" <<<"$log"
check "--skip-train evaluates --valid-data-path without --train-data-path ($ok): $log" $?

# (4) Refusals.
expect_failure "--data-path=$A: given with --train-data-path: give either --data-path" \
  "$tessera" samples "${per[@]}" --data-path "$A" --train-data-path "$A"
expect_failure "--data-path=$A: given with --valid-data-path" \
  "$tessera" train "${per[@]}" --data-path "$A" --valid-data-path "$B"
expect_failure "--mock-data=set: given with --valid-data-path: give either --mock-data or the dataset paths" \
  "$tessera" train "${per[@]}" --mock-data --valid-data-path "$B" --test-data-path "$C"
expect_failure "--split=90,10,0: given with --train-data-path: --split does not apply" \
  "$tessera" train "${per[@]}" --split 90,10,0 --train-data-path "$A" --valid-data-path "$B"
expect_failure "--train-data-path=(none): training needs it (--valid-data-path is given" \
  "$tessera" train "${per[@]}" --valid-data-path "$B"
expect_failure "--valid-data-path: weights and prefixes must alternate" \
  "$tessera" train "${per[@]}" --train-data-path "$A" --valid-data-path 1 "$B" "$C" 2
expect_failure "$work/missing" "$tessera" train "${per[@]}" --train-data-path "$A" --valid-data-path "$work/missing"
expect_failure "--split=test: the test split has no dataset (no --test-data-path)" \
  "$tessera" samples "${per[@]}" --train-data-path "$A" --split test

finish split_data_paths_cli
