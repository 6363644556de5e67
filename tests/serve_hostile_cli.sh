#!/usr/bin/env bash
# tessera serve against hostile clients (issue 57), loopback only: tests/serve_hostile.py's chunked body
# over --max-body-bytes, slow clients, an idle-connection flood and malformed framing, each while a normal
# request is timed; then prompt limits on a RoPE model (--max-prompt-tokens from --seq-length, bytes
# refused before tokenizing), /completions' fields and seeds, the log of refused requests and of a client
# that left, and a port in use said before the model loads.
set -uo pipefail
tessera=${1:?usage: serve_hostile_cli.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'cleanup_server_and "$work"' EXIT
source "$here/lib/checks.sh"
source "$here/lib/server.sh"
"$tessera" train --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 64 \
  --position-embedding-type rope --mock-data --tokenizer-type NullTokenizer --vocab-size 60 \
  --make-vocab-size-divisible-by 64 --micro-batch-size 4 --global-batch-size 8 --train-iters 10 --lr 3e-3 \
  --log-interval 10 --eval-iters 0 --seed 7 --save "$work/rope" >"$work/train.log" 2>&1
rc=$?
check "training exits 0: $(tail -3 "$work/train.log")" $rc

max_body=65536
start_server "$work/serve.log" "$tessera" serve --load "$work/rope" --port 0 --max-body-bytes $max_body \
  --request-timeout 3 --max-connections-per-client 16 --max-tokens-to-generate 40
rc=$?
check "the server starts and prints its port: $(cat "$work/serve.log")" $rc
grep -qF "prompts of at most 32 tokens" "$work/serve.log"
check "--max-prompt-tokens defaults to --seq-length under RoPE: $(grep serving "$work/serve.log")" $?
python3 "$here/serve_hostile.py" "$port" "$server_pid" $max_body 3 16
check "hostile clients (serve_hostile.py)" $?

url="http://127.0.0.1:$port"
post() {  # post PATH JSON: prints the status, then the body
  curl -s -w '\n%{http_code}' -X "$([ "$1" = /api ] && echo PUT || echo POST)" -H 'Content-Type: application/json' \
    -d "$2" "$url$1"
}
long=$(python3 -c 'print(" ".join(["7"] * 40))')
out=$(post /api "{\"prompts\": [\"$long\"], \"tokens_to_generate\": 1}")
[[ $out == *"40 tokens are more than --max-prompt-tokens 32"*400 ]]
check "a 40-token prompt is refused on a RoPE model: $out" $?
huge=$(python3 -c 'print("7 " * 20000)')
out=$(post /completions "{\"prompt\": \"$huge\", \"max_tokens\": 1}")
[[ $out == *"bytes are more than --max-prompt-bytes"*400 ]]
check "a 40000-byte prompt is refused by its bytes: ${out:0:200}" $?
out=$(post /completions '{"prompt": "3 5", "max_tokens": 2, "frobnicate": 1}')
[[ $out == *"unknown field 'frobnicate'"*400 ]]
check "/completions refuses an unknown field by name: $out" $?
out=$(post /completions '{"prompt": "3 5", "max_tokens": 2, "model": "gpt", "stream": false, "user": "u", "seed": 18446744073709551615}')
[[ $out == *'"choices"'*200 ]]
check "/completions takes OpenAI's model, stream, user and a seed of 2^64-1: $out" $?
out=$(post /api '{"prompts": ["3 5"], "tokens_to_generate": 2, "random_seed": 18446744073709551615}')
[[ $out == *'"tokens"'*200 ]]
check "/api takes a random_seed of 2^64-1: $out" $?

grep -qF "request from 127.0.0.3: PUT /api, 1 prompt(s), 20 tokens" "$work/serve.log"
check "a client that left is logged with its address: $(grep 'request from' "$work/serve.log" | tail -3)" $?
grep -qF "POST /completions -> 400: unknown field 'frobnicate'" "$work/serve.log"
check "refused requests are logged with status and reason" $?
grep -q "PUT /api -> 413: the request body is larger than --max-body-bytes" "$work/serve.log"
check "the chunked body's 413 is logged" $?
grep -q "refused a connection: too many connections from 127.0.0.1" "$work/serve.log"
check "refused connections are logged" $?

# A port in use is said before the model loads (a checkpoint without its weights would fail to load
# first), with exit status 1.
cp -r "$work/rope" "$work/no_weights"
find "$work/no_weights" -name 'model.*.safetensors' -delete
out=$("$tessera" serve --load "$work/no_weights" --port "$port" 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -qF "port $port is in use" <<<"$out"
check "a second server on port $port fails before loading with 'port $port is in use' (rc $rc): $out" $?

stop_server
rc=$?
check "SIGTERM stops the server with exit status 0: $(tail -3 "$work/serve.log")" $rc
finish serve_hostile_cli
