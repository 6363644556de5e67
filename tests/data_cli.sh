#!/usr/bin/env bash
# End-to-end checks of the data path as a user runs it: preprocess (jsonl and plain text, errors by
# file and line), merge-datasets, and training on the result (resuming at the same samples).
set -uo pipefail
tessera=${1:?usage: data_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
null_tok=(--tokenizer-type NullTokenizer --vocab-size 60)

# Documents of arithmetic sequences written as NullTokenizer text (ids separated by spaces).
for part in a b; do
  for d in $(seq 1 40); do
    start=$(( (d * 7 + ${#part}) % 50 )); stride=$(( d % 5 + 1 )); n=$(( 20 + d % 30 ))
    ids=$(for i in $(seq 0 $n); do printf '%d ' $(( (start + i * stride) % 59 )); done)
    printf '{"text": "%s", "id": %d}\n' "$ids" "$d"
  done > "$work/$part.jsonl"
done
cat "$work/a.jsonl" "$work/b.jsonl" > "$work/all.jsonl"

out=$("$tessera" preprocess --input "$work/all.jsonl" --output-prefix "$work/all" --append-eod --workers 2 \
      "${null_tok[@]}" 2>&1)
check "preprocess exits 0: $out" $?
grep -qF "80 documents" <<<"$out"
check "preprocess should report 80 documents: $out" $?

# Megatron's merge: preprocessing the halves and merging them gives the same bytes as the whole.
mkdir -p "$work/parts"
for part in a b; do
  "$tessera" preprocess --input "$work/$part.jsonl" --output-prefix "$work/parts/$part" --append-eod \
    "${null_tok[@]}" >/dev/null 2>&1
done
"$tessera" merge-datasets --input "$work/parts" --output-prefix "$work/merged" >/dev/null
check "merge-datasets exits 0" $?
cmp -s "$work/merged.bin" "$work/all_text_document.bin" && cmp -s "$work/merged.idx" "$work/all_text_document.idx"
check "merged dataset must equal the dataset of the concatenated input byte for byte" $?

# Malformed input names the file and line; --skip-malformed counts instead; empty documents are skipped.
printf '{"text": "1 2 3"}\n{"text": 5}\n{"txt": "1"}\nnot json\n{"text": ""}\n' > "$work/bad.jsonl"
out=$("$tessera" preprocess --input "$work/bad.jsonl" --output-prefix "$work/bad" "${null_tok[@]}" 2>&1)
[ $? -ne 0 ] && grep -qF "bad.jsonl:2: a non-string value for key \"text\"" <<<"$out"
check "a non-string value must fail with file:line: $out" $?
out=$("$tessera" preprocess --input "$work/bad.jsonl" --output-prefix "$work/bad" --skip-malformed "${null_tok[@]}" 2>&1)
[ $? -eq 0 ] && grep -qF "skipped 1 empty documents; skipped 3 malformed lines" <<<"$out"
check "--skip-malformed should count 3 malformed lines and 1 empty document: $out" $?
# A text the tokenizer refuses (words for the NullTokenizer) fails with file:line on the workers too,
# rather than aborting, and leaves no temporary file behind.
mkdir "$work/refused"
printf '{"text": "1 2 3"}\n{"text": "1 two 3"}\n' > "$work/refused/in.jsonl"
expect_failure "in.jsonl:2: NullTokenizer: 'two' is not a token id" "$tessera" preprocess --workers 2 \
  --input "$work/refused/in.jsonl" --output-prefix "$work/refused/out" "${null_tok[@]}"
[ "$(ls "$work/refused")" = in.jsonl ]
check "a refused text leaves no output: $(ls "$work/refused")" $?
# A directory given as an input file is named as one; an ifstream opens it and reads it as empty, which
# made split-sentences write 0 documents and generate say "no prompt given".
expect_failure "--input=$work/refused: cannot open the file: it is a directory" "$tessera" split-sentences \
  --input "$work/refused" --output "$work/sentences.jsonl"
expect_failure "--prompt-file=$work/refused: cannot open the file: it is a directory" "$tessera" generate \
  --load "$work/no_checkpoint" --prompt-file "$work/refused"
# A key given twice is refused before anything is written (both builders wrote the same files, and the
# second rename failed after the first had put its files in place).
expect_failure "--json-keys: 'text' is given twice" "$tessera" preprocess --input "$work/refused/in.jsonl" \
  --json-keys text text --output-prefix "$work/refused/twice" "${null_tok[@]}"
printf '{"text": "1 2 3"}\n{"text": "4 5"}\n' > "$work/many.jsonl"
# --workers far beyond the documents starts no more threads than there are documents (100000 crashed).
"$tessera" preprocess --input "$work/many.jsonl" --output-prefix "$work/many" --workers 100000 "${null_tok[@]}" \
  >/dev/null 2>&1
check "--workers 100000 exits 0" $?
out=$("$tessera" preprocess --input "$work/missing.jsonl" --output-prefix "$work/x" "${null_tok[@]}" 2>&1)
[ $? -ne 0 ] && grep -qF "missing.jsonl is not a readable file" <<<"$out"
check "a missing input must be named: $out" $?

# Plain text: blank-line separated paragraphs become documents.
printf '1 2 3\n4 5\n\n\n6 7 8\n\n9\n' > "$work/paragraphs.txt"
out=$("$tessera" preprocess --input "$work/paragraphs.txt" --input-format paragraphs --output-prefix "$work/para" \
      "${null_tok[@]}" 2>&1)
grep -qF "3 documents, 9 tokens" <<<"$out"
check "paragraphs: 3 documents of 9 tokens: $out" $?

# A truncated index is reported with its path before training starts.
cp "$work/all_text_document.bin" "$work/trunc_text_document.bin"
head -c 40 "$work/all_text_document.idx" > "$work/trunc_text_document.idx"
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "${null_tok[@]}"
       --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --log-interval 1 --eval-iters 1 --eval-interval 4
       --split 90,10,0 --data-cache-path "$work/cache")
out=$("$tessera" train "${model[@]}" --data-path "$work/trunc_text_document" --train-iters 2 2>&1)
[ $? -ne 0 ] && grep -qF "trunc_text_document.idx" <<<"$out"
check "a truncated .idx must be named: $out" $?

# Training on the dataset, and resuming at the same samples: the resumed run's losses equal the full run's.
full=$("$tessera" train "${model[@]}" --data-path "$work/all_text_document" --train-iters 6 --eod-mask-loss 2>&1)
check "training on --data-path exits 0: $full" $?
"$tessera" train "${model[@]}" --data-path "$work/all_text_document" --train-iters 3 --lr-decay-iters 6 \
  --eod-mask-loss --save "$work/ckpt" >/dev/null 2>&1
resumed=$("$tessera" train "${model[@]}" --data-path "$work/all_text_document" --train-iters 6 --eod-mask-loss \
          --load "$work/ckpt" 2>&1)
for it in 4 5 6; do
  a=$(grep -o "iteration        $it/.*lm loss: [0-9.E+-]*" <<<"$full" | grep -o "lm loss: [0-9.E+-]*")
  b=$(grep -o "iteration        $it/.*lm loss: [0-9.E+-]*" <<<"$resumed" | grep -o "lm loss: [0-9.E+-]*")
  [ -n "$a" ] && [ "$a" = "$b" ]
  check "iteration $it: resumed '$b' vs uninterrupted '$a'" $?
done
out=$("$tessera" train "${model[@]}" --data-path "$work/all_text_document" --train-iters 2 --reset-position-ids \
      --reset-attention-mask 2>&1)
check "training with --reset-position-ids --reset-attention-mask exits 0: $out" $?
ls "$work/cache"/*.npy >/dev/null 2>&1 || ls "$work/cache"/* >/dev/null 2>&1
check "sample indices should be cached under --data-cache-path" $?

# An input without documents is an error naming it, not an empty dataset that fails in training.
: > "$work/empty.jsonl"
expect_failure "--input $work/empty.jsonl: no documents to write" "$tessera" preprocess --input "$work/empty.jsonl" \
  --output-prefix "$work/empty" "${null_tok[@]}"
# A corpus too small for the split: the error says how to train on it.
expect_failure "a corpus this small needs --split 100,0,0 (all of it for training) and --eval-iters 0" \
  "$tessera" train "${model[@]}" --data-path "$work/many_text_document" --train-iters 1 --split 969,30,1
# Data preprocessed with another tokenizer (ids up to 58, a vocabulary of 40 here): the dataset and the cause.
expect_failure "all_text_document: token id" "$tessera" train "${model[@]}" --data-path "$work/all_text_document" \
  --train-iters 1 --vocab-size 40
expect_failure "the data was likely preprocessed with another tokenizer" "$tessera" train "${model[@]}" \
  --data-path "$work/all_text_document" --train-iters 1 --vocab-size 40

finish data_cli
