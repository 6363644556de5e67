#!/usr/bin/env bash
# The planner against this machine: for each CPU layout, calibrate (`tessera plan --calibrate`, under the
# same mpirun and thread count as the run), predict (`tessera plan --cluster`), then train and measure
# (`tessera train`: the fastest log interval's elapsed time per iteration after the first; the largest
# rank's peak RSS from /usr/bin/time). Prints one row per layout with the relative errors. On a shared
# machine both sides take their least disturbed measurement: calibration keeps each rate's fastest run,
# training its fastest interval.
#   bench/plan_vs_measured.sh [path/to/tessera] [cores]     (ONLY=REGEX runs the matching layouts only)
set -euo pipefail
tessera=${1:-build/release/tessera}
cores=${2:-$(nproc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

model="--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 256 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 1023 --lr 1e-4 --seed 7"
export OMPI_MCA_mpi_yield_when_idle=1

printf "%-34s %5s %12s %12s %7s %12s %12s %7s\n" layout ranks "pred ms" "meas ms" err "pred MiB" "meas MiB" err
measure() {  # measure NAME RANKS FLAGS...
  local name=$1 np=$2
  shift 2
  [[ -z "${ONLY:-}" || "$name" =~ $ONLY ]] || return 0
  local flags="$*"
  export OMP_NUM_THREADS=$((cores / np > 0 ? cores / np : 1))
  mpirun --oversubscribe --allow-run-as-root -np "$np" "$tessera" plan $model $flags --calibrate \
    --calibrate-output "$work/cluster.json" > "$work/calibration.txt"
  "$tessera" plan $model $flags --cluster "$work/cluster.json" --json > "$work/plan.json"
  mpirun --oversubscribe --allow-run-as-root -np "$np" /usr/bin/time -f "maxrss_kib %M" "$tessera" train $model $flags \
    --train-iters 10 --log-interval 2 --eval-iters 0 > "$work/train.txt" 2>&1
  python3 - "$name" "$np" "$work/plan.json" "$work/train.txt" <<'EOF'
import json, re, sys
name, np, plan_path, train_path = sys.argv[1:]
plan = json.load(open(plan_path))
text = open(train_path).read()
measured_ms = min(float(x) for x in re.findall(r"elapsed time per iteration \(ms\): ([0-9.]+)", text)[1:])
measured_mib = max(int(x) for x in re.findall(r"maxrss_kib (\d+)", text)) / 1024
predicted_ms = plan["iteration_seconds"]["total"] * 1e3
predicted_mib = plan["peak_memory_bytes"] / 2**20
print("%-34s %5s %12.1f %12.1f %+6.1f%% %12.0f %12.0f %+6.1f%%" % (name, np, predicted_ms, measured_ms,
      100 * (predicted_ms / measured_ms - 1), predicted_mib, measured_mib, 100 * (predicted_mib / measured_mib - 1)))
EOF
}

measure "tp1 dp1 mbs4 gbs8" 1 --micro-batch-size 4 --global-batch-size 8
measure "tp1 dp1 mbs2 gbs8 (4 micro-batches)" 1 --micro-batch-size 2 --global-batch-size 8
measure "tp2" 2 --micro-batch-size 4 --global-batch-size 8 --tensor-model-parallel-size 2
measure "tp2 sp" 2 --micro-batch-size 4 --global-batch-size 8 --tensor-model-parallel-size 2 --sequence-parallel
measure "dp2" 2 --micro-batch-size 4 --global-batch-size 8
measure "dp2 mbs2 (2 micro-batches)" 2 --micro-batch-size 2 --global-batch-size 8
measure "pp2 (1F1B, 4 micro-batches)" 2 --micro-batch-size 2 --global-batch-size 8 --pipeline-model-parallel-size 2
measure "pp2 v2 (interleaved, 4 micro-batches)" 2 --micro-batch-size 2 --global-batch-size 8 \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
measure "pp2 ZB-H1 (4 micro-batches)" 2 --micro-batch-size 2 --global-batch-size 8 --pipeline-model-parallel-size 2 \
  --enable-zero-bubble
measure "pp2 ZB-V (4 micro-batches)" 2 --micro-batch-size 2 --global-batch-size 8 --pipeline-model-parallel-size 2 \
  --zero-bubble-v-schedule
measure "dp2 recompute full" 2 --micro-batch-size 4 --global-batch-size 8 --recompute-granularity full \
  --recompute-method uniform --recompute-num-layers 1
