#!/usr/bin/env bash
# Once per data cache: the Brown documents in a fixed random order (so that the 2% held out spans Brown's
# genres), a BPE tokenizer trained on the other 98% only (lossless on Brown: identity normalisation, byte
# fallback and a newline piece, so bits per byte count every byte of the text), and the .bin/.idx dataset
# BROWN/brown_spVOCAB_text_document. Needs BROWN/brown.jsonl (scripts/setup.sh fetches it).
# usage: scripts/prepare_brown.sh path/to/tessera BROWN VOCAB
set -euo pipefail
cd "$(dirname "$0")/.."
tessera=$1 brown=$2 vocab=$3
[ -f "$brown/brown_sp${vocab}_text_document.idx" ] && exit 0
[ -f "$brown/brown.jsonl" ] || { echo "prepare_brown: no $brown/brown.jsonl (run scripts/setup.sh)" >&2; exit 1; }
/usr/bin/python3 scripts/brown_split.py "$brown/brown.jsonl" "$brown/brown_shuffled.jsonl" "$brown/brown_train.txt"
"$tessera" tokenizer train --input "$brown/brown_train.txt" --model-prefix "$brown/brown_sp$vocab" \
  --vocab-size "$vocab" --model-type bpe --normalization-rule-name identity --byte-fallback \
  --user-defined-symbols $'\n'
"$tessera" preprocess --input "$brown/brown_shuffled.jsonl" --json-keys text --append-eod --workers "$(nproc)" \
  --output-prefix "$brown/brown_sp$vocab" --tokenizer-type SentencePieceTokenizer \
  --tokenizer-model "$brown/brown_sp$vocab.model"
