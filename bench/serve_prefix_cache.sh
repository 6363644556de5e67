#!/usr/bin/env bash
# Prefix caching under a shared-prefix workload: two servers side by side on the same checkpoint, one
# with the prefix cache (the default) and one with --no-inference-dynamic-batching-enable-prefix-caching,
# both with blocks of BLOCK positions; bench/serve_prefix_cache.py sends each the multiple-choice workload
# (a CONTEXT-token context, four endings, max_tokens 1 with top-5 log-probs) and the system-prompt
# workload (one CONTEXT-token system prompt, 16 greedy tokens per question), RUNS times (default 5),
# alternating which server goes first. Prints every run (wall time, prompt tokens, tokens read from the
# cache by /metrics) and the median and range of the speedup (off / on wall time) per workload, with the
# CPU and the load average. Without a checkpoint it makes one of serve_load.sh's shape (4 layers, hidden
# 256, 8 heads, GPT-2's vocabulary) with 1024 learned positions. Loopback only.
# usage: RUNS=5 BLOCK=16 bench/serve_prefix_cache.sh [CHECKPOINT] [ITEMS] [CONTEXT]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tessera=${TESSERA:-$root/build/release/tessera}
items=${2:-8}
context=${3:-384}
runs=${RUNS:-5}
block=${BLOCK:-16}
work=$(mktemp -d)
source "$root/bench/lib/servers.sh"
declare -A pids ports
trap 'stop_bench_servers; rm -rf "$work"' EXIT
ckpt=${1:-}
echo "command: RUNS=$runs BLOCK=$block OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} bench/serve_prefix_cache.sh ${1:-\"\"} $items $context"
bench_machine
if [ -z "$ckpt" ]; then
  bench_checkpoint 1024
  ckpt=$work/ckpt
fi
start_bench_server off "$ckpt" --inference-dynamic-batching-block-size "$block" --no-inference-dynamic-batching-enable-prefix-caching
start_bench_server on "$ckpt" --inference-dynamic-batching-block-size "$block"
for run in $(seq 1 "$runs"); do
  order="off on"; [ $((run % 2)) = 0 ] && order="on off"
  for workload in mc system; do
    for mode in $order; do
      # Each run's prompts are new (--seed): nothing is cached from an earlier run.
      python3 "$root/bench/serve_prefix_cache.py" "${ports[$mode]}" --workload $workload --items "$items" \
        --context "$context" --clients 4 --seed "$run" --json | tail -1 |
        sed "s/^{/{\"run\": $run, \"mode\": \"$mode\", /" >>"$work/runs.jsonl"
    done
  done
done
stop_bench_servers "server stopped"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work/runs.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["run"], r["workload"], r["mode"]): r for r in rows}
runs = sorted({r["run"] for r in rows})
print("\n| run | workload | requests | prompt tokens | read from the cache (on) | off: s | on: s | speedup |")
print("|---|---|---|---|---|---|---|---|")
for run in runs:
    for w in ("mc", "system"):
        off, on = by[(run, w, "off")], by[(run, w, "on")]
        assert off["cache_hits"] == 0
        print(f"| {run} | {w} | {on['requests']} | {on['prompt_tokens']} | {on['cache_hits']} "
              f"({100 * on['cache_hits'] / on['prompt_tokens']:.0f}%) | {off['seconds']:.2f} | {on['seconds']:.2f} "
              f"| {off['seconds'] / on['seconds']:.2f}x |")
for w in ("mc", "system"):
    s = [by[(r, w, "off")]["seconds"] / by[(r, w, "on")]["seconds"] for r in runs]
    print(f"| median (range) | {w} | | | | | | **{statistics.median(s):.2f}x** ({min(s):.2f}-{max(s):.2f}) |")
PY
