#!/usr/bin/env bash
# The REST server under load: the sequential server (--inference-max-requests 1: one sequence at a time,
# as before continuous batching) against continuous batching (the default) on the same checkpoint, with
# 1, 8 and 32 concurrent clients (bench/serve_load.py), RUNS times (default 5). Every run is recorded:
# a table of every run (generated tokens/s, the batched/sequential ratio, latency p50/p99), then per
# client count the median and the range over the runs. The machine (lscpu's model name) and its load
# average before and after are printed with the command, since a shared machine's load moves the
# numbers; the ratio of each run is measured within that run (both servers run side by side and the
# client counts alternate between them), so it is what to compare across machines and loads.
# Without a checkpoint it makes one of the default run's shape (4 layers, hidden 256, 8 heads, GPT-2's
# vocabulary size; one iteration on mock data: speed does not depend on the weights). Fails if any
# request failed. Loopback only.
# usage: RUNS=5 bench/serve_load.sh [CHECKPOINT] [requests per client] [tokens per request]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tessera=${TESSERA:-$root/build/release/tessera}
requests=${2:-4}
tokens=${3:-32}
runs=${RUNS:-5}
work=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT  # $pid: the servers
ckpt=${1:-}
prompt="The jury said"
echo "command: RUNS=$runs OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} bench/serve_load.sh ${1:-\"\"} $requests $tokens"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc --all) CPUs), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
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
  "$tessera" serve --load "$ckpt" --port 0 --http-threads 40 --max-connections-per-client 40 "${flags[@]}" >"$work/$mode.log" 2>&1 &
  pids[$mode]=$!
  pid="${pids[*]}"
  for _ in $(seq 1 600); do
    ports[$mode]=$(grep -o "on http://127.0.0.1:[0-9]*" "$work/$mode.log" | grep -o "[0-9]*$" || true)
    [ -n "${ports[$mode]}" ] && break
    sleep 0.1
  done
  [ -n "${ports[$mode]}" ] || { cat "$work/$mode.log"; exit 1; }
done
for run in $(seq 1 "$runs"); do
  order="sequential batched"; [ $((run % 2)) = 0 ] && order="batched sequential"  # neither always goes first
  for clients in 1 8 32; do
    for mode in $order; do
      echo "run $run, $mode server:" >&2
      python3 "$root/bench/serve_load.py" "${ports[$mode]}" --clients "$clients" --requests "$requests" \
        --tokens "$tokens" --prompt "$prompt" --json | tee /dev/stderr | tail -1 |
        sed "s/^{/{\"run\": $run, \"mode\": \"$mode\", /" >>"$work/runs.jsonl"
    done
  done
done
for mode in sequential batched; do
  kill -TERM "${pids[$mode]}" && wait "${pids[$mode]}" || true
  grep -A1 "server stopped" "$work/$mode.log" >&2  # and the step timing line
done
pid=""
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work/runs.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["run"], r["clients"], r["mode"]): r for r in rows}
runs = sorted({r["run"] for r in rows})
clients = sorted({r["clients"] for r in rows})
print("\nEvery run:\n")
print("| run | clients | sequential tokens/s | batched tokens/s | batched / sequential | sequential p50 / p99 (ms) | batched p50 / p99 (ms) |")
print("|---|---|---|---|---|---|---|")
for run in runs:
    for c in clients:
        s, b = by[(run, c, "sequential")], by[(run, c, "batched")]
        print(f"| {run} | {c} | {s['tokens_per_s']:.1f} | {b['tokens_per_s']:.1f} | {b['tokens_per_s'] / s['tokens_per_s']:.2f}x "
              f"| {s['p50_ms']:.0f} / {s['p99_ms']:.0f} | {b['p50_ms']:.0f} / {b['p99_ms']:.0f} |")
def spread(values, fmt):
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"
print(f"\nMedian (min-max) over {len(runs)} runs:\n")
print("| clients | sequential tokens/s | batched tokens/s | batched / sequential | sequential p50 / p99 (ms) | batched p50 / p99 (ms) |")
print("|---|---|---|---|---|---|")
for c in clients:
    s = [by[(r, c, "sequential")] for r in runs]
    b = [by[(r, c, "batched")] for r in runs]
    ratio = [y["tokens_per_s"] / x["tokens_per_s"] for x, y in zip(s, b)]
    print(f"| {c} | {spread([x['tokens_per_s'] for x in s], '{:.1f}')} | {spread([x['tokens_per_s'] for x in b], '{:.1f}')} "
          f"| **{spread(ratio, '{:.2f}')}x** | {spread([x['p50_ms'] for x in s], '{:.0f}')} / {spread([x['p99_ms'] for x in s], '{:.0f}')} "
          f"| {spread([x['p50_ms'] for x in b], '{:.0f}')} / {spread([x['p99_ms'] for x in b], '{:.0f}')} |")
PY
