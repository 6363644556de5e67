#!/usr/bin/env bash
# TeraPipe's token slices against plain 1F1B on 2 pipeline stages: the bubble and the iteration time that
# `tessera train` measures, with m = 1 and 2 micro-batches per iteration, unsliced, 4 and 8 equal slices
# and `auto` (TeraPipe's dynamic program over the planner's costs: the calibration in the working
# directory when there is one). Every configuration runs RUNS times (default 3), each run a row; the
# iteration time is the last logged interval's. The machine and its load average are printed, since
# 2 ranks on a 2-core machine share it with whatever else runs.
# Usage: RUNS=3 bench/token_slices_bubble.sh [path/to/tessera]
set -euo pipefail
tessera=${1:-build/release/tessera}
runs=${RUNS:-3}
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
model="--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512
       --mock-data --tokenizer-type NullTokenizer --vocab-size 1024 --micro-batch-size 1 --lr 1e-4 --train-iters 12
       --log-interval 4 --eval-iters 0 --pipeline-model-parallel-size 2"
echo "command: RUNS=$runs bench/token_slices_bubble.sh $tessera"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(getconf _NPROCESSORS_ONLN) CPUs), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| m | slices | run | slice lengths | theory | measured bubble | iteration (ms) |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for m in 1 2; do
  for slices in none 4 8 auto; do
    flag=()
    [ "$slices" = none ] || flag=(--pipeline-token-slices "$slices")
    for run in $(seq "$runs"); do
      out=$(mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tessera" train $model \
              --global-batch-size "$m" "${flag[@]}" 2>&1)
      line=$(grep -E "pipeline bubble: measured" <<<"$out" | tail -1)
      measured=$(grep -oE "measured [0-9.]+" <<<"$line" | grep -oE "[0-9.]+")
      theory=$(grep -oE "= [0-9.]+" <<<"$line" | grep -oE "[0-9.]+")
      ms=$(grep -oE "elapsed time per iteration \(ms\): [0-9.]+" <<<"$out" | tail -1 | grep -oE "[0-9.]+$")
      lengths=$(grep -oE "token slices \(auto\): [0-9,]+" <<<"$out" | grep -oE "[0-9,]+$" || true)
      [ -n "$lengths" ] || lengths=$([ "$slices" = none ] && echo "512" || echo "$slices x $((512 / slices))")
      echo "| $m | $slices | $run | $lengths | $theory | $measured | $ms |"
    done
  done
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
