#!/usr/bin/env bash
# tessera serve's OpenAI endpoints end to end (tests/serve_openai_client.py): a loglikelihood request as
# lm-evaluation-harness's local-completions sends it gives the log-probs of `tessera debug-forward`'s
# logits on the same tokens (within 1e-4), the tokenizer endpoints answer as its remote tokenizer reads
# them, errors are OpenAI's objects. One tiny CPU model, loopback only.
set -uo pipefail
tessera=${1:?usage: serve_openai_cli.sh path/to/tessera}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'cleanup_server_and "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
source "$(dirname "$0")/lib/server.sh"
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 64
       --mock-data --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 4 --global-batch-size 8
       --train-iters 20 --lr 3e-3 --log-interval 10 --eval-iters 0 --seed 7 --make-vocab-size-divisible-by 64)
"$tessera" train "${model[@]}" --save "$work/ckpt" >"$work/train.log" 2>&1
rc=$?
check "training exits 0: $(tail -3 "$work/train.log")" $rc

context=3,5,7,9,11
continuation=13,15,2
"$tessera" debug-forward --load "$work/ckpt" --tokens "$context,$continuation" --out "$work/logits.safetensors" \
  >"$work/forward.log" 2>&1
rc=$?
check "debug-forward exits 0: $(tail -3 "$work/forward.log")" $rc

start_server "$work/serve.log" "$tessera" serve --load "$work/ckpt" --port 0 --max-logprobs 5 --served-model-name tiny
rc=$?
check "the server starts and prints its port: $(cat "$work/serve.log")" $rc
timeout 120 python3 "$here/serve_openai_client.py" "http://127.0.0.1:$port" "$work/logits.safetensors" "$context" \
  "$continuation"
check "OpenAI endpoint checks (serve_openai_client.py)" $?
stop_server
rc=$?
check "SIGTERM stops the server with exit status 0: $(tail -3 "$work/serve.log")" $rc

finish serve_openai_cli
