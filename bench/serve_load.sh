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
source "$root/bench/lib/servers.sh"
declare -A pids ports
trap 'stop_bench_servers; rm -rf "$work"' EXIT
ckpt=${1:-}
prompt="The jury said"
echo "command: RUNS=$runs OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} bench/serve_load.sh ${1:-\"\"} $requests $tokens"
bench_machine
if [ -z "$ckpt" ]; then
  bench_checkpoint 256
  ckpt=$work/ckpt
  prompt="464 8053 531 3226 4026 286"  # ids: the checkpoint's tokenizer reads numbers
fi
# Both servers run side by side (the idle one sleeps), and the client counts alternate between them, so
# that a slower spell of a shared machine falls on both.
start_bench_server sequential "$ckpt" --http-threads 40 --max-connections-per-client 40 --inference-max-requests 1
start_bench_server batched "$ckpt" --http-threads 40 --max-connections-per-client 40
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
stop_bench_servers "server stopped"  # and the step timing line after it
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
