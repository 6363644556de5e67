#!/usr/bin/env bash
# Throughput of `tessera preprocess` (read jsonl, GPT-2 BPE, write .bin/.idx) on the Brown corpus
# (5.98 MB of text in 500 documents) with 1 and 2 workers, against tiktoken's encoder (npm, gpt2,
# one thread) on the same text. Needs scripts/setup.sh's data cache and a release build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TESSERA_DATA_CACHE:-$root/data-cache}"
tessera="$root/build/release/tessera"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
input="$cache/brown/brown.jsonl"
bytes=$(stat -c %s "$input")
echo "input: $input ($bytes bytes), $(nproc --all) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for workers in 1 2; do
  start=$(date +%s.%N)
  "$tessera" preprocess --input "$input" --output-prefix "$out/brown" --append-eod --workers "$workers" \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$cache/gpt2/gpt2-vocab.json" \
    --merge-file "$cache/gpt2/gpt2-merges.txt" >/dev/null 2>&1
  end=$(date +%s.%N)
  awk -v b="$bytes" -v s="$start" -v e="$end" -v w="$workers" \
    'BEGIN { printf "tessera preprocess, %d worker(s): %.2f s, %.2f MB/s of jsonl\n", w, e - s, b / 1e6 / (e - s) }'
done
# The same documents' text through tiktoken (encoding only: no JSON, no output files).
/usr/bin/python3 -c 'import json,sys; sys.stdout.write("".join(json.loads(l)["text"] for l in open(sys.argv[1])))' \
  "$input" > "$out/brown.txt"
node "$root/bench/tokenizer_bench_tiktoken.js" "$cache/npm/node_modules" "$out/brown.txt" 3
