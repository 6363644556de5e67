#!/usr/bin/env bash
# Fetches the official OpenAI Node client (npm package `openai`) into a data cache, for
# tests/serve_openai_node_cli.sh: a real client of tessera serve's OpenAI endpoints, so that the tests
# check what such a client sends and how it reads the answers (streams, errors), not our idea of it.
# Cache: $TESSERA_DATA_CACHE, default data-cache/ at the repository root (git-ignored). Nothing is
# downloaded at test time; the test skips (exit 77) when the package is absent.
# Idempotent: a second run with the same pinned version downloads nothing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TESSERA_DATA_CACHE:-$root/data-cache}"
# Pinned so that the client the tests pass under does not change under us: the last 6.x, as 7.x needs
# Node 22. A directory of its own: fetch_gpt2_vocab.sh and fetch_bert_vocab.sh reinstall theirs when
# their own lists change.
packages=(openai@6.49.0)

npm_dir="$cache/npm-openai"
stamp="$npm_dir/.installed"

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${packages[*]}" ]; then
  command -v npm >/dev/null || { echo "fetch_openai_node: npm not found (apt-get install npm)" >&2; exit 1; }
  echo "fetch_openai_node: installing ${packages[*]} into $npm_dir"
  mkdir -p "$npm_dir"
  npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error "${packages[@]}"
  echo "${packages[*]}" > "$stamp"
fi

[ -f "$npm_dir/node_modules/openai/package.json" ] || {
  echo "fetch_openai_node: $npm_dir/node_modules/openai is missing" >&2; exit 1; }
echo "openai (Node): $npm_dir/node_modules/openai"
