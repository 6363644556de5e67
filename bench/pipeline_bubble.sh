#!/usr/bin/env bash
# The pipeline bubble measured by `tessera train` on 4 stages against the theory (p-1)/(v*m), for
# 1F1B and interleaved 1F1B with m = 4, 8, 16 micro-batches. Each rank gets its own cores: run it on a
# machine with at least 4 x THREADS cores (oversubscribed ranks distort the bubble).
# Usage: bench/pipeline_bubble.sh [path/to/tessera] [threads per rank]
set -euo pipefail
tessera=${1:-build/release/tessera}
threads=${2:-1}
export OMP_NUM_THREADS=$threads OMPI_MCA_mpi_yield_when_idle=1
model="--num-layers 8 --hidden-size 256 --num-attention-heads 8 --seq-length 256 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 1000 --micro-batch-size 1 --lr 1e-4 --train-iters 4
       --log-interval 2 --eval-iters 0 --pipeline-model-parallel-size 4"
echo "| schedule | m | theory (p-1)/(v·m) | measured bubble | iteration (ms) | activations held per stage (measured/schedule max) |"
echo "| --- | --- | --- | --- | --- | --- |"
for v in 1 2; do
  for m in 4 8 16; do
    out=$(mpirun --oversubscribe --allow-run-as-root --bind-to none -np 4 "$tessera" train $model \
            --global-batch-size "$m" --num-virtual-stages-per-pipeline-rank "$v" 2>&1)
    line=$(grep -E "pipeline bubble: measured" <<<"$out" | tail -1)
    measured=$(grep -oE "measured [0-9.]+" <<<"$line" | grep -oE "[0-9.]+")
    theory=$(grep -oE "= [0-9.]+" <<<"$line" | grep -oE "[0-9.]+")
    held=$(grep -oE "schedule max\): [0-9/ ]+" <<<"$line" | sed 's/schedule max): //')
    ms=$(grep -oE "elapsed time per iteration \(ms\): [0-9.]+" <<<"$out" | tail -1 | grep -oE "[0-9.]+$")
    echo "| $([ "$v" = 1 ] && echo 1F1B || echo "interleaved, v = $v") | $m | $theory | $measured | $ms | $held |"
  done
done
