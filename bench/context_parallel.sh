#!/usr/bin/env bash
# Context parallelism (issue 37): activation memory per rank against sequence length at cp 1 (one
# process) and cp 2 (two ranks, ring attention), measured by `tessera train`'s memory line (the
# activation records' peak from Tessera's accounting, all tensors, peak RSS) beside the planner's
# activations per rank (`tessera plan --json`, built-in cpu device), and the ring's exposed exchange:
# the trainer's cp-ring-wait timer (the waits after each ring step's blocks, inside the compute timers)
# beside the plan's "context-parallel ring (exposed)". Every run is printed.
# Usage: bench/context_parallel.sh [path/to/tessera] [seq lengths...]
set -euo pipefail
tessera=${1:-build/release/tessera}
shift || true
seqs=${*:-256 512 1024 2048}
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
model="--num-layers 2 --hidden-size 128 --num-attention-heads 4 --mock-data --tokenizer-type NullTokenizer
       --vocab-size 255 --micro-batch-size 1 --global-batch-size 2 --lr 1e-4 --train-iters 4 --log-interval 2
       --eval-iters 0 --position-embedding-type rope"
echo "| seq | cp (ranks) | measured activations peak per rank (MB) | trainer's theory (MB) | planned activations per rank (MB) | planned ring buffers (MB) | all tensors peak (MB) | peak RSS (MB) | forward-compute (ms, min-max over ranks) | backward-compute (ms) | cp-ring-wait, measured (ms) | planned ring exposed (ms) | iteration (ms) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for seq in $seqs; do
  for cp in 1 2; do
    flags="$model --seq-length $seq --max-position-embeddings $seq --context-parallel-size $cp"
    out=$(mpirun --oversubscribe --allow-run-as-root -np "$cp" "$tessera" train $flags 2>&1)
    memory=$(grep -F "memory (MB):" <<<"$out" | tail -1)
    timers=$(grep -F "timers (ms per iteration" <<<"$out" | tail -1)
    num() { grep -oE "$1" <<<"$2" | grep -oE "[0-9.]+" | tr '\n' ' '; }
    read -r measured theory < <(num "activations peak \(max over ranks\) [0-9.]+ \(theory [0-9.]+\)" "$memory"; echo)
    read -r tensors < <(num "all tensors peak \(max over ranks\) [0-9.]+" "$memory"; echo)
    read -r rss < <(num "peak RSS \(max over ranks\) [0-9.]+" "$memory"; echo)
    fwd=$(grep -oE "forward-compute \([0-9.]+, [0-9.]+\)" <<<"$timers" | grep -oE "\(.*\)")
    bwd=$(grep -oE "backward-compute \([0-9.]+, [0-9.]+\)" <<<"$timers" | grep -oE "\(.*\)")
    ring=$(grep -oE "cp-ring-wait \(in compute\) \([0-9.]+, [0-9.]+\)" <<<"$timers" | grep -oE "\([0-9.]+, [0-9.]+\)" || echo "-")
    iteration=$(grep -oE "elapsed time per iteration \(ms\): [0-9.]+" <<<"$out" | tail -1 | grep -oE "[0-9.]+$")
    read -r act comm exposed < <("$tessera" plan $flags --device cpu --num-devices "$cp" --json 2>/dev/null | python3 -c '
import json, sys
p = json.load(sys.stdin)
m = p["memory_per_rank_bytes"][0]
print("%.2f %.2f %.3f" % (m["activations"] / 2**20, m["communication"] / 2**20,
                          p["iteration_seconds"]["context_parallel_communication"] * 1e3))')
    echo "| $seq | $cp | $measured | $theory | $act | $comm | $tensors | $rss | $fwd | $bwd | $ring | $exposed | $iteration |"
  done
done
