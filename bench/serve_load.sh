#!/usr/bin/env bash
# The REST server under load: the sequential server (--inference-max-requests 1: one sequence at a time,
# as before continuous batching) against continuous batching (the default) on the same checkpoint, with
# 1, 8 and 32 concurrent clients (bench/serve_load.py), then a table of generated tokens/s, the ratio and
# latency percentiles. Without a checkpoint it makes one of the default run's shape (4 layers, hidden
# 256, 8 heads, GPT-2's vocabulary size; one iteration on mock data: speed does not depend on the
# weights). Fails if any request failed. Loopback only.
# usage: bench/serve_load.sh [CHECKPOINT] [requests per client] [tokens per request]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tessera=${TESSERA:-$root/build/release/tessera}
requests=${2:-4}
tokens=${3:-32}
work=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT  # $pid: the servers
ckpt=${1:-}
prompt="The jury said"
if [ -z "$ckpt" ]; then
  ckpt=$work/ckpt
  "$tessera" train --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 --num-layers 4 --hidden-size 256 \
    --num-attention-heads 8 --seq-length 128 --max-position-embeddings 256 --micro-batch-size 1 --global-batch-size 1 \
    --train-iters 1 --lr 1e-4 --eval-iters 0 --save "$ckpt" >"$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
  prompt="464 8053 531 3226 4026 286"  # ids: the checkpoint's tokenizer reads numbers
fi
# Both servers run side by side (the idle one sleeps), and the client counts alternate between them, so
# that a slower spell of a shared machine falls on both.
declare -A pids ports
for mode in sequential batched; do
  flags=(); [ $mode = sequential ] && flags=(--inference-max-requests 1)
  "$tessera" serve --load "$ckpt" --port 0 --http-threads 40 "${flags[@]}" >"$work/$mode.log" 2>&1 &
  pids[$mode]=$!
  pid="${pids[*]}"
  for _ in $(seq 1 600); do
    ports[$mode]=$(grep -o "on http://127.0.0.1:[0-9]*" "$work/$mode.log" | grep -o "[0-9]*$" || true)
    [ -n "${ports[$mode]}" ] && break
    sleep 0.1
  done
  [ -n "${ports[$mode]}" ] || { cat "$work/$mode.log"; exit 1; }
done
for clients in 1 8 32; do
  for mode in sequential batched; do
    echo "$mode server:" >&2
    python3 "$root/bench/serve_load.py" "${ports[$mode]}" --clients "$clients" --requests "$requests" \
      --tokens "$tokens" --prompt "$prompt" --json | tee /dev/stderr | tail -1 >>"$work/$mode.jsonl"
  done
done
for mode in sequential batched; do
  kill -TERM "${pids[$mode]}" && wait "${pids[$mode]}" || true
  grep "server stopped" "$work/$mode.log" >&2
done
pid=""
python3 - "$work/sequential.jsonl" "$work/batched.jsonl" <<'PY'
import json, sys
seq = [json.loads(l) for l in open(sys.argv[1])]
bat = [json.loads(l) for l in open(sys.argv[2])]
print("| clients | sequential tokens/s | batched tokens/s | batched / sequential | sequential p50 / p99 (ms) | batched p50 / p99 (ms) |")
print("|---|---|---|---|---|---|")
for s, b in zip(seq, bat):
    print(f"| {s['clients']} | {s['tokens_per_s']:.1f} | {b['tokens_per_s']:.1f} | **{b['tokens_per_s'] / s['tokens_per_s']:.2f}x** "
          f"| {s['p50_ms']:.0f} / {s['p99_ms']:.0f} | {b['p50_ms']:.0f} / {b['p99_ms']:.0f} |")
PY
