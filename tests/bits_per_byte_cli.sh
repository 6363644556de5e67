#!/usr/bin/env bash
# The validation line's bits per byte on real text (a SentencePiece model trained here on WikiText), and
# the progress bar: absent from a redirected multi-rank run's log, present when asked for.
set -uo pipefail
tessera=${1:?usage: bits_per_byte_cli.sh path/to/tessera}
root="$(cd "$(dirname "$0")/.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
unset TESSERA_PROGRESS
mpirun=(mpirun --oversubscribe --allow-run-as-root -np 2)

head -c 150000 "$root/data/eval/wiki.valid.tokens" >"$work/text.txt"
"$tessera" tokenizer train --input "$work/text.txt" --model-prefix "$work/sp" --vocab-size 500 --model-type bpe \
  --num-threads 1 >/dev/null 2>&1
check "a SentencePiece model trained" $?
tok=(--tokenizer-type SentencePieceTokenizer --tokenizer-model "$work/sp.model")
"$tessera" preprocess --input "$work/text.txt" --input-format paragraphs --append-eod --output-prefix "$work/wiki" \
  "${tok[@]}" >/dev/null 2>&1
check "the text preprocessed" $?

train=(train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --data-path "$work/wiki_text_document"
       --split 80,20,0 "${tok[@]}" --micro-batch-size 4 --global-batch-size 8 --lr 3e-3 --train-iters 6
       --log-interval 2 --eval-interval 3 --eval-iters 4 --data-cache-path "$work/cache")
"${mpirun[@]}" "$tessera" "${train[@]}" >"$work/log.txt" 2>&1
ok=$?; check "a 2-rank run on real text: $(tail -5 "$work/log.txt")" $ok

# bits per byte = loss / ln 2 * tokens / bytes; the text's own tokens per byte must give about the same.
line=$(grep -m1 " validation loss at iteration 3 |" "$work/log.txt")
tokens=$(( $(stat -c %s "$work/wiki_text_document.bin") / 2 ))  # uint16 ids (vocabulary 500)
bytes=$(stat -c %s "$work/text.txt")
verdict=$(/usr/bin/python3 - "$line" "$tokens" "$bytes" <<'PY'
import math, re, sys
line, tokens, bytes_ = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
loss = float(re.search(r"lm loss value: (\S+) \|", line).group(1))
bpb = float(re.search(r"bits per byte: (\S+) \|", line).group(1))
expected = loss / math.log(2) * tokens / bytes_
print("ok" if abs(bpb / expected - 1) < 0.1 else f"bits per byte {bpb}, expected about {expected:.4f}")
PY
)
[ "$verdict" = ok ]
check "the validation line's bits per byte agrees with the text's tokens per byte ($line): $verdict" $?

# mpirun gives the ranks a pseudo-terminal even with its output in a file: still no progress bar.
! grep -q $'\r' "$work/log.txt"
check "no carriage returns in a redirected 2-rank log" $?
TESSERA_PROGRESS=1 "${mpirun[@]}" "$tessera" "${train[@]}" --eval-iters 0 >"$work/forced.txt" 2>&1
grep -q $'\r.*left' "$work/forced.txt"
ok=$?; check "TESSERA_PROGRESS=1 draws it: $(tail -c 300 "$work/forced.txt")" $ok

# Ids without text (NullTokenizer, mock data) have no bytes: no bits per byte.
out=$("$tessera" train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 \
      --tokenizer-type NullTokenizer --vocab-size 40 --mock-data --micro-batch-size 2 --global-batch-size 2 \
      --lr 1e-3 --train-iters 2 --eval-interval 2 --eval-iters 1 2>&1)
grep -q " validation loss at iteration 2 | " <<<"$out" && ! grep -q "bits per byte" <<<"$out"
check "mock data: a validation line without bits per byte: $out" $?

finish bits_per_byte_cli
