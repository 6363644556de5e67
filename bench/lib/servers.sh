# Sourced by the serving benchmarks (serve_load.sh, serve_prefix_cache.sh, serve_chunked_prefill.sh,
# serve_step_time.sh): the machine line, the benchmark checkpoint and servers started side by side.
# The caller sets $tessera and $work (a temporary directory it removes) and traps EXIT with
# stop_bench_servers.

# bench_machine: the commit, the CPU and the load average before the runs.
bench_machine() {
  echo "commit: $(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --short HEAD)"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc --all) CPUs), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# bench_checkpoint POSITIONS: makes $work/ckpt, a checkpoint of the serving benchmarks' shape (4 layers,
# hidden 256, 8 heads, GPT-2's vocabulary, POSITIONS learned positions; one iteration on mock data: speed
# does not depend on the weights). Its tokenizer reads token ids written as numbers.
bench_checkpoint() {
  "$tessera" train --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 --num-layers 4 --hidden-size 256 \
    --num-attention-heads 8 --seq-length 128 --max-position-embeddings "$1" --micro-batch-size 1 --global-batch-size 1 \
    --train-iters 1 --lr 1e-4 --eval-iters 0 --save "$work/ckpt" >"$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
}

# start_bench_server NAME CHECKPOINT [FLAGS...]: `tessera serve` on a free loopback port, logging to
# $work/NAME.log; waits for its port and sets ports[NAME] and pids[NAME] (the caller declares both with
# `declare -A pids ports`).
start_bench_server() {
  local name=$1 ckpt=$2
  shift 2
  "$tessera" serve --load "$ckpt" --port 0 "$@" >"$work/$name.log" 2>&1 &
  pids[$name]=$!
  ports[$name]=""
  for _ in $(seq 1 600); do
    ports[$name]=$(grep -so "on http://127.0.0.1:[0-9]*" "$work/$name.log" | grep -o "[0-9]*$" || true)
    [ -n "${ports[$name]}" ] && return 0
    kill -0 "${pids[$name]}" 2>/dev/null || break
    sleep 0.1
  done
  cat "$work/$name.log"
  exit 1
}

# stop_bench_servers [PATTERN]: SIGTERM to every server started, each log's line matching PATTERN (the
# closing "server stopped" line and what follows it) to stderr. Safe to call twice (the EXIT trap).
stop_bench_servers() {
  local name
  for name in "${!pids[@]}"; do
    kill -TERM "${pids[$name]}" 2>/dev/null && wait "${pids[$name]}" 2>/dev/null
    [ -n "${1:-}" ] && grep -A1 "$1" "$work/$name.log" >&2
    unset "pids[$name]"
  done
  return 0
}
