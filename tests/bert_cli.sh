#!/usr/bin/env bash
# BERT from text to a trained checkpoint, as Megatron's BERT path: a WordPiece vocabulary trained on
# text, sentence-split .bin/.idx data, `tessera pretrain_bert` under mpirun with Megatron's log lines
# (lm loss and sop loss), a checkpoint that resumes to the uninterrupted run's losses, the run without
# the binary head, and clear errors for what BERT cannot do.
set -uo pipefail
tessera=${1:?usage: bert_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
export OMPI_MCA_mpi_yield_when_idle=1
command -v mpirun >/dev/null || skip "mpirun not found"
root=$(cd "$(dirname "$0")/.." && pwd)
run2() { mpirun --oversubscribe --allow-run-as-root -np 2 -x OMP_NUM_THREADS=1 "$@"; }

# A corpus from the repository's own documentation: every paragraph of at least two sentences a document.
python3 - "$root" "$work/corpus.jsonl" "$work/corpus.txt" <<'PY'
import json, pathlib, sys
root, jsonl, txt = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
docs = []
for md in sorted(list(root.glob("*.md")) + list((root / "docs").glob("*.md"))):
    for para in md.read_text().split("\n\n"):
        text = " ".join(para.split())
        if text.count(". ") >= 1 and not text.startswith(("|", "```", "#")):
            docs.append(text)
with open(jsonl, "w") as f:
    for d in docs: f.write(json.dumps({"text": d}) + "\n")
open(txt, "w").write("\n".join(docs) + "\n")
PY
out=$("$tessera" tokenizer train --model-type wordpiece --input "$work/corpus.txt" --model-prefix "$work/wp" \
      --vocab-size 1500 2>&1)
check "tokenizer train --model-type wordpiece: $out" $?
tok=(--tokenizer-type BertWordPieceLowerCase --vocab-file "$work/wp-vocab.txt")
out=$("$tessera" preprocess --input "$work/corpus.jsonl" --output-prefix "$work/docs" "${tok[@]}" --split-sentences 2>&1)
check "preprocess --split-sentences: $out" $?
[ -f "$work/docs_text_sentence.idx" ]; check "docs_text_sentence.idx written: $(ls "$work")" $?

flags=(--data-path "$work/docs_text_sentence" "${tok[@]}" --split 90,10,0 --num-layers 2 --hidden-size 32
       --num-attention-heads 4 --seq-length 64 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
       --log-interval 1 --eval-interval 3 --eval-iters 1 --train-iters 6 --data-cache-path "$work/cache")
out=$(run2 "$tessera" pretrain_bert "${flags[@]}" 2>&1)
check "pretrain_bert at np 2: $(tail -5 <<<"$out")" $?
full=$(grep -oE "iteration +[0-9]+/ +6 .*lm loss: [^|]*\| sop loss: [^|]*" <<<"$out" | sed -E 's/.*iteration +([0-9]+)\/.*(lm loss: .*)/\1 \2/')
[ "$(wc -l <<<"$full")" -eq 6 ]; check "six iterations with lm loss and sop loss: $full" $?
grep -qE "validation loss at iteration 3 \| lm loss value: [0-9.E+-]+ \| lm loss PPL: [0-9.E+-]+ \| sop loss value: [0-9.E+-]+ \| sop loss PPL:" <<<"$out"
ok=$?; check "Megatron's validation line with the sop loss: $(grep validation <<<"$out")" $ok
! grep -q "bits per byte" <<<"$out"; check "no bits per byte for masked words: $(grep validation <<<"$out")" $?

# Stopped at iteration 3 and resumed: the same losses as the uninterrupted run.
out=$(run2 "$tessera" pretrain_bert "${flags[@]}" --save "$work/ckpt" --exit-interval 3 2>&1)
check "pretrain_bert --exit-interval 3 --save: $(tail -3 <<<"$out")" $?
out=$(run2 "$tessera" pretrain_bert "${flags[@]}" --load "$work/ckpt" 2>&1)
check "pretrain_bert --load: $(tail -3 <<<"$out")" $?
resumed=$(grep -oE "iteration +[0-9]+/ +6 .*lm loss: [^|]*\| sop loss: [^|]*" <<<"$out" | sed -E 's/.*iteration +([0-9]+)\/.*(lm loss: .*)/\1 \2/')
[ "$resumed" = "$(tail -3 <<<"$full")" ]; check "resumed losses equal the uninterrupted run's: '$resumed' vs '$(tail -3 <<<"$full")'" $?

# Without the binary head: no token types, no sop loss.
out=$("$tessera" pretrain_bert "${flags[@]}" --bert-no-binary-head --train-iters 2 2>&1)
check "--bert-no-binary-head trains: $(tail -3 <<<"$out")" $?
grep -q "lm loss:" <<<"$out" && ! grep -q "sop loss" <<<"$out"; check "no sop loss without the binary head" $?

# What BERT cannot do is refused before training, naming the flag.
expect_failure "--position-embedding-type=rope: BERT uses learned_absolute positions" \
  "$tessera" pretrain_bert "${flags[@]}" --position-embedding-type rope
expect_failure "--model-family=t5: must be one of" "$tessera" train "${flags[@]}" --model-family t5
expect_failure "--mask-prob=1.5: must be in (0, 1)" "$tessera" pretrain_bert "${flags[@]}" --mask-prob 1.5
expect_failure "has no [CLS], [SEP], [MASK] and [PAD] tokens" \
  "$tessera" pretrain_bert "${flags[@]/BertWordPieceLowerCase/NullTokenizer}" --vocab-size 100
expect_failure "holds a 'bert' model, a bidirectional encoder" "$tessera" generate --load "$work/ckpt" --prompt "the model"
finish bert_cli
