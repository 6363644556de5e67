#!/usr/bin/env bash
# Multi-token prediction under Ouroboros (issue 53): 1F1B and Ouroboros (K = 3 modules, 10 synchronous
# iterations) on the same 2 pipeline ranks, without and with one MTP module (--mtp-num-layers 1, factor 0.1,
# on the last stage / module K-1), on mock data for 200 iterations. Prints each run's iteration time
# (median of the logged intervals after the first) and its last logged lm and mtp_1 losses.
# usage: bench/ouroboros_mtp.sh [path/to/tessera]
set -euo pipefail
cd "$(dirname "$0")/.."
tessera=${1:-build/release/tessera}
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
model=(--num-layers 6 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 512 --micro-batch-size 4 --global-batch-size 8 --lr 1e-3
       --lr-decay-style cosine --lr-warmup-iters 10 --train-iters 200 --log-interval 20 --eval-iters 0
       --hidden-dropout 0 --attention-dropout 0 --position-embedding-type rope --seed 7
       --pipeline-model-parallel-size 2)
median_ms() { grep -oE "elapsed time per iteration \(ms\): [0-9.]+" "$1" | grep -oE "[0-9.]+$" | tail -n +2 |
              sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
last() { grep -oE "$2: [0-9.E+-]+" "$1" | tail -1 | grep -oE "[0-9.E+-]+$" || echo -; }
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| schedule | MTP | ms/iteration (median) | lm loss, iteration 200 | mtp_1 loss, iteration 200 |"
echo "|---|---|---:|---:|---:|"
log=$(mktemp)
for schedule in 1f1b ouroboros; do
  for mtp in 0 1; do
    extra=(--pipeline-schedule "$schedule")
    [ "$schedule" = ouroboros ] && extra+=(--ouroboros-warmup-iters 10)
    [ "$mtp" = 1 ] && extra+=(--mtp-num-layers 1)
    mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tessera" train "${model[@]}" "${extra[@]}" >"$log" 2>&1
    echo "| $schedule | $mtp | $(median_ms "$log") | $(last "$log" "lm loss") | $(last "$log" "mtp_1 loss") |"
  done
done
rm -f "$log"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
