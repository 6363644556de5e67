#!/usr/bin/env bash
# Encode throughput (MB/s, 1 MB = 10^6 bytes) of Tessera's GPT-2 tokenizer against the npm package
# tiktoken (encoding "gpt2"), on the same text, on one thread each, on this machine; prints the ratio.
# The text is wiki.test.tokens repeated to TOKENIZER_BENCH_MB (default 10) MB. Each side encodes it as
# one string RUNS times (default 3); "best" is the fastest run, "first" the one that fills Tessera's
# word cache. Needs the data cache of scripts/fetch_gpt2_vocab.sh (run here if missing) and node.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TESSERA_DATA_CACHE:-$root/data-cache}"
mb="${TOKENIZER_BENCH_MB:-10}"
runs="${RUNS:-3}"
out="$root/build/bench-tokenizer"
mkdir -p "$out"

TESSERA_DATA_CACHE="$cache" "$root/scripts/fetch_gpt2_vocab.sh" > /dev/null

text="$out/wiki_${mb}mb.txt"
if [ ! -s "$text" ]; then
  src="$root/data/eval/wiki.test.tokens"
  : > "$text.tmp"
  while [ "$(stat -c %s "$text.tmp")" -lt $((mb * 1000000)) ]; do cat "$src" >> "$text.tmp"; done
  mv "$text.tmp" "$text"
fi

# Compiled here with the Release flags (-O3 -march=native) rather than by CMake, so that this bench
# needs no build target of its own.
bin="$out/tokenizer_bench"
srcs=("$root/bench/tokenizer_bench.cc" "$root/src/data/gpt2_bpe_tokenizer.cc")
if [ ! -x "$bin" ] || [ -n "$(find "${srcs[@]}" "$root/src/data/gpt2_bpe_tokenizer.h" -newer "$bin")" ]; then
  g++ -std=c++20 -O3 -DNDEBUG -march=native -Wall -Wextra -Werror -I"$root/src" "${srcs[@]}" \
    $(pkg-config --cflags --libs libpcre2-8) -o "$bin"
fi

echo "text: $text ($(stat -c %s "$text") bytes), $runs runs each, $(nproc --all) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
tessera=$(OMP_NUM_THREADS=1 "$bin" "$cache/gpt2/gpt2-vocab.json" "$cache/gpt2/gpt2-merges.txt" "$text" "$runs")
tiktoken=$(node "$root/bench/tokenizer_bench_tiktoken.js" "$cache/npm/node_modules" "$text" "$runs")
echo "$tessera"
echo "$tiktoken"

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<< "$2"; }
if [ "$(field tokens "$tessera")" != "$(field tokens "$tiktoken")" ]; then
  echo "tokenizer_bench: token counts differ" >&2
  exit 1
fi
awk -v a="$(field best_mbps "$tessera")" -v b="$(field best_mbps "$tiktoken")" \
  'BEGIN { printf "tessera / tiktoken encode throughput: %.2fx (%.2f vs %.2f MB/s)\n", a / b, a, b }'
