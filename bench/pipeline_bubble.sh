#!/usr/bin/env bash
# The pipeline bubble measured by `tessera train` against the schedule's theory, for 1F1B, interleaved
# 1F1B (v = 2), ZB-H1 (--enable-zero-bubble) and ZB-V (--zero-bubble-v-schedule) at each pipeline size in
# PPS and micro-batch count in MS, from the log's "pipeline bubble" line: iteration time, measured bubble,
# activations held per stage against the schedule's maximum, and the activation bytes per stage against
# the prediction from the same op lists (train/memory_report.h), with the peak RSS beside them. Each rank
# gets its own cores only on a machine with at least PP x THREADS cores: oversubscribed ranks distort the
# bubble (they still compare with each other within one run).
# Usage: [PPS="2 4"] [MS="4 8 16"] [SCHEDULES="1f1b interleaved zb-h1 zb-v"] bench/pipeline_bubble.sh [path/to/tessera] [threads per rank]
set -euo pipefail
tessera=${1:-build/release/tessera}
threads=${2:-1}
export OMP_NUM_THREADS=$threads OMPI_MCA_mpi_yield_when_idle=1
model="--num-layers 8 --hidden-size 256 --num-attention-heads 8 --seq-length 256 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 1000 --micro-batch-size 1 --lr 1e-4 --train-iters 4
       --log-interval 2 --eval-iters 0"
echo "| pp | schedule | m | theory | measured bubble | iteration (ms) | activations held per stage (measured/schedule max) | activation MB per stage (measured/predicted) | peak RSS (MB, max over ranks) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for pp in ${PPS:-2 4}; do
  for schedule in ${SCHEDULES:-1f1b interleaved zb-h1 zb-v}; do
    case $schedule in
      1f1b) name=1F1B flags="" ;;
      interleaved) name="interleaved, v = 2" flags="--num-virtual-stages-per-pipeline-rank 2" ;;
      zb-h1) name=ZB-H1 flags="--enable-zero-bubble" ;;
      zb-v) name=ZB-V flags="--zero-bubble-v-schedule" ;;
      *) echo "unknown schedule $schedule (1f1b, interleaved, zb-h1, zb-v)" >&2; exit 2 ;;
    esac
    for m in ${MS:-4 8 16}; do
      out=$(mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$pp" "$tessera" train $model \
              --pipeline-model-parallel-size "$pp" --global-batch-size "$m" $flags 2>&1) ||
        { echo "$name at pp $pp, m $m failed:" >&2; tail -20 <<<"$out" >&2; exit 1; }
      line=$(grep -E "pipeline bubble: measured" <<<"$out" | tail -1)
      measured=$(grep -oE "measured [0-9.]+" <<<"$line" | grep -oE "[0-9.]+")
      theory=$(grep -oE "= [0-9.]+" <<<"$line" | head -1 | grep -oE "[0-9.]+")
      held=$(grep -oE "schedule max\): [0-9/ ]+" <<<"$line" | sed 's/schedule max): //; s/ *$//')
      bytes=$(grep -oE "measured/predicted\): [0-9./ ]+" <<<"$line" | sed 's/measured\/predicted): //; s/ *$//')
      rss=$(grep -oE "peak RSS \(max over ranks\) [0-9.]+" <<<"$out" | tail -1 | grep -oE "[0-9.]+$")
      ms=$(grep -oE "elapsed time per iteration \(ms\): [0-9.]+" <<<"$out" | tail -1 | grep -oE "[0-9.]+$")
      echo "| $pp | $name | $m | $theory | $measured | $ms | $held | $bytes | $rss |"
    done
  done
done
