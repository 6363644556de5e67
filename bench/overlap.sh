#!/usr/bin/env bash
# Overlapped data-parallel gradient reduction: GPT-2 124M (mock data) at dp 2, with and without
# --overlap-grad-reduce, for both optimizers. Prints per run the median over iterations (the first,
# warm-up, left out) of the time per iteration and of the exposed gradient reduction: the trainer's
# grads-reduce timer, the time the step waits for the bucket collectives after backward has ended.
# Its minimum over ranks is the exposed reduction: the rank that ends backward last waits only for the
# communication, while the others also wait for it (their maximum adds the ranks' skew, large on a
# shared machine). Then the ratio of the exposed reductions with/without overlap. Usage:
#   bench/overlap.sh [path/to/tessera] [iterations] [ranks]
# Environment: BUCKET (--ddp-bucket-size, default Megatron's 40000000), MPIRUN (default mpirun), ONLY
# (adamw or distributed: one optimizer only), LOGS (a directory for the runs' logs; default a temporary one).
set -euo pipefail
cd "$(dirname "$0")/.."
tessera=${1:-build/release/tessera}
iters=${2:-5}
ranks=${3:-2}
bucket=${BUCKET:-40000000}
mpirun=${MPIRUN:-mpirun}
logs=${LOGS:-$(mktemp -d)}
mkdir -p "$logs"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
model=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024
       --mock-data --tokenizer-type NullTokenizer --vocab-size 50257
       --micro-batch-size 1 --global-batch-size "$ranks" --train-iters "$iters" --lr 1e-4
       --log-interval 1 --eval-iters 0 --ddp-bucket-size "$bucket")

median() { sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "nan" }'; }
ms() { grep -oE "elapsed time per iteration \(ms\): [0-9.]+" <<<"$1" | grep -oE "[0-9.]+$" | tail -n +2 | median; }
# The min (field 1) or max (field 2) over ranks of "grads-reduce (min, max)".
reduce_ms() { grep -oE "grads-reduce \([0-9.]+, [0-9.]+\)" <<<"$1" | tr -d '(),' | awk -v f="$2" '{ print $(1 + f) }' |
              tail -n +2 | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }'; }
run() { "$mpirun" --oversubscribe --allow-run-as-root -np "$ranks" -x OMP_NUM_THREADS -x OMPI_MCA_mpi_yield_when_idle=1 \
          "$tessera" train "${model[@]}" "$@" 2>&1; }

echo "GPT-2 124M, dp $ranks, mbs 1, seq 1024, --ddp-bucket-size $bucket, $iters iterations (first left out), $(lscpu | grep 'Model name' | sed 's/  */ /g')"
echo "| optimizer | flags | ms/iteration | exposed grad reduction (ms, min over ranks) | max over ranks | ratio with/without |"
echo "|---|---|---:|---:|---:|---:|"
optimizers=("" --use-distributed-optimizer)
[ "${ONLY:-}" = adamw ] && optimizers=("")
[ "${ONLY:-}" = distributed ] && optimizers=(--use-distributed-optimizer)
for optimizer in "${optimizers[@]}"; do
  base=""
  for overlap in "" "--overlap-grad-reduce"; do
    flags="$overlap"
    [ -n "$optimizer" ] && [ -n "$overlap" ] && flags="$overlap --overlap-param-gather"
    log="$logs/overlap${optimizer:+-distributed}${overlap:+-overlap}.log"
    run $optimizer $flags > "$log" || { cat "$log" >&2; exit 1; }
    out=$(cat "$log")
    r=$(reduce_ms "$out" 1)
    [ -z "$overlap" ] && base=$r
    echo "| ${optimizer:-AdamW (all-reduce)} | ${flags:-none} | $(ms "$out") | $r | $(reduce_ms "$out" 2) | $([ -n "$overlap" ] && ratio "$r" "$base" || echo "") |"
  done
done
echo "logs: $logs"
