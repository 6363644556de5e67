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
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
ckpt=${1:-}
echo "command: RUNS=$runs BLOCK=$block OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset} bench/serve_prefix_cache.sh ${1:-\"\"} $items $context"
echo "commit: $(git -C "$root" rev-parse --short HEAD)"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc --all) CPUs), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -z "$ckpt" ]; then
  ckpt=$work/ckpt
  "$tessera" train --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 --num-layers 4 --hidden-size 256 \
    --num-attention-heads 8 --seq-length 128 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 1 \
    --train-iters 1 --lr 1e-4 --eval-iters 0 --save "$ckpt" >"$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
fi
declare -A pids ports
for mode in off on; do
  flags=(); [ $mode = off ] && flags=(--no-inference-dynamic-batching-enable-prefix-caching)
  "$tessera" serve --load "$ckpt" --port 0 --inference-dynamic-batching-block-size "$block" "${flags[@]}" \
    >"$work/$mode.log" 2>&1 &
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
for mode in off on; do
  kill -TERM "${pids[$mode]}" && wait "${pids[$mode]}" || true
  grep "server stopped" "$work/$mode.log" >&2
done
pid=""
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
