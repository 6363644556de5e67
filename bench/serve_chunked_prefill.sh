#!/usr/bin/env bash
# Chunked prefill (issue 52, item 6): the inter-token time of running requests while a long prompt
# arrives. Servers side by side on one checkpoint: one without chunked prefill (each joining prompt fed
# whole in one step) and one per budget in CHUNKS (default "512 128": --enable-chunked-prefill
# --inference-dynamic-batching-max-tokens N); bench/serve_chunked_prefill.py runs against each in turn,
# RUNS times (default 3), alternating the order: STREAMS (4) streamed greedy-ish requests of TOKENS (160)
# tokens, and a LONG-token prompt (1536) sent once they have 8 tokens each. Prints every run (the streams'
# median inter-token time before the long prompt, median and longest gap while it was prefilled, the long
# request's latency) and the medians, with the CPU and the load average. Without a checkpoint it makes one
# of serve_load.sh's shape (4 layers, hidden 256, 8 heads, GPT-2's vocabulary) with 2048 learned positions.
# Loopback only.
# usage: RUNS=3 CHUNKS="512 128" bench/serve_chunked_prefill.sh [CHECKPOINT] [STREAMS] [TOKENS] [LONG]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tessera=${TESSERA:-$root/build/release/tessera}
streams=${2:-4}
tokens=${3:-160}
long=${4:-1536}
runs=${RUNS:-3}
chunks=${CHUNKS:-512 128}
work=$(mktemp -d)
source "$root/bench/lib/servers.sh"
declare -A pids ports
trap 'stop_bench_servers; rm -rf "$work"' EXIT
ckpt=${1:-}
echo "command: RUNS=$runs CHUNKS=\"$chunks\" OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} bench/serve_chunked_prefill.sh ${1:-\"\"} $streams $tokens $long"
bench_machine
if [ -z "$ckpt" ]; then
  bench_checkpoint 2048
  ckpt=$work/ckpt
fi
modes="off"
start_bench_server off "$ckpt"
for n in $chunks; do
  modes="$modes $n"
  start_bench_server "$n" "$ckpt" --enable-chunked-prefill --inference-dynamic-batching-max-tokens "$n"
done
for run in $(seq 1 "$runs"); do
  order=$modes; [ $((run % 2)) = 0 ] && order=$(tr ' ' '\n' <<<"$modes" | tac | tr '\n' ' ')
  for mode in $order; do
    python3 "$root/bench/serve_chunked_prefill.py" "${ports[$mode]}" --streams "$streams" --tokens "$tokens" \
      --long "$long" --seed "$run" --json | tail -1 | sed "s/^{/{\"run\": $run, \"mode\": \"$mode\", /" >>"$work/runs.jsonl"
  done
done
stop_bench_servers "server stopped"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work/runs.jsonl" "$modes" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
modes = sys.argv[2].split()
name = lambda m: "whole prompts" if m == "off" else f"chunked, {m} tokens a step"
print("\n| run | server | inter-token before (ms) | during the long prefill: median (ms) | longest gap (ms) | long prompt's latency (ms) |")
print("|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['run']} | {name(r['mode'])} | {r['itl_before_ms']} | {r['itl_during_median_ms']} | "
          f"{r['itl_during_max_ms']} | {r['long_latency_ms']} |")
for m in modes:
    rs = [r for r in rows if r["mode"] == m]
    med = lambda k: statistics.median(r[k] for r in rs)
    print(f"| median | {name(m)} | {med('itl_before_ms')} | {med('itl_during_median_ms')} | "
          f"**{med('itl_during_max_ms')}** | {med('long_latency_ms')} |")
PY
