#!/usr/bin/env bash
# The sentence splitter of `preprocess --split-sentences` against the Brown corpus's own sentences
# (scripts/sentence_split_eval.py; BENCHMARKS.md "Sentence splitting"): its boundary F1 on running
# text must stay above the floor measured when it was written (0.9554 then; the naive split's 0.9153).
# Skipped without the data cache's brown_sentences.jsonl (scripts/fetch_brown.sh).
set -uo pipefail
tessera=${1:?usage: sentence_split_brown.sh path/to/tessera}
root=$(cd "$(dirname "$0")/.." && pwd)
python3 "$root/scripts/sentence_split_eval.py" --tessera "$tessera" --min-f1 0.95
