#!/usr/bin/env bash
# tessera serve driven by the official OpenAI Node client (npm `openai`, scripts/fetch_openai_node.sh puts
# it in the data cache; tests/serve_openai_node_client.mjs holds the checks): completions from a string
# and from token ids with logprobs, echo, stop and several prompts, streamed completions, chat plain and
# streamed with include_usage, the client's stream helper, and errors as the client's APIError classes.
# The greedy text is checked against `tessera generate`'s, counts against /tokenize's. Loopback only.
set -uo pipefail
tessera=${1:?usage: serve_openai_node_cli.sh path/to/tessera}
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TESSERA_DATA_CACHE:-$root/data-cache}
work=$(mktemp -d)
trap 'cleanup_server_and "$work"' EXIT
source "$root/tests/lib/checks.sh"
source "$root/tests/lib/server.sh"
command -v node >/dev/null || skip "no node (scripts/setup.sh installs nodejs)"
openai="$cache/npm-openai/node_modules/openai"
[ -f "$openai/package.json" ] || skip "no npm package openai in $openai (scripts/setup.sh fetches it)"
[ -f "$cache/gpt2/gpt2-vocab.json" ] || skip "no GPT-2 vocabulary in $cache/gpt2 (scripts/setup.sh fetches it)"
tokenizer=(--tokenizer-type GPT2BPETokenizer --vocab-file "$cache/gpt2/gpt2-vocab.json"
           --merge-file "$cache/gpt2/gpt2-merges.txt")

"$tessera" train --mock-data --tokenizer-type NullTokenizer --vocab-size 50256 --num-layers 2 --hidden-size 32 \
  --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 2 \
  --train-iters 2 --lr 1e-3 --eval-iters 0 --save "$work/model" >"$work/train.log" 2>&1
rc=$?
check "training the tiny model exits 0: $(tail -3 "$work/train.log")" $rc

prompt="The jury said that"
tokens=8
"$tessera" generate --load "$work/model" "${tokenizer[@]}" --prompt "$prompt" --tokens-to-generate $tokens \
  --temperature 0 >"$work/generated.txt" 2>"$work/generate.log"
rc=$?
check "tessera generate exits 0: $(tail -3 "$work/generate.log")" $rc

start_server "$work/serve.log" "$tessera" serve --load "$work/model" "${tokenizer[@]}" --port 0 --served-model-name tiny \
  --chat-template plain --max-logprobs 5
rc=$?
check "the server starts and prints its port: $(cat "$work/serve.log")" $rc
timeout 60 node "$root/tests/serve_openai_node_client.mjs" "$openai" "http://127.0.0.1:$port" "$work/generated.txt" \
  "$prompt" $tokens
check "the OpenAI Node client's checks (serve_openai_node_client.mjs)" $?
stop_server
rc=$?
check "SIGTERM stops the server with exit status 0: $(tail -3 "$work/serve.log")" $rc

finish serve_openai_node_cli
