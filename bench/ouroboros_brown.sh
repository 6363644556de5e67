#!/usr/bin/env bash
# Ouroboros (--pipeline-schedule ouroboros: K = 3 modules on 2 ranks, delayed gradients) against 1F1B on
# the same 2 pipeline ranks, on the Brown corpus: the same model, data, seed and learning-rate schedule.
# Prints each run's iteration time (median of the logged intervals after the first) and final training
# and validation loss, and draws loss against iterations and against wall time for both
# (OUT/ouroboros_brown.png; the metrics stay in OUT/<schedule>/metrics.jsonl).
# usage: LR=1e-3 bench/ouroboros_brown.sh [path/to/tessera] [iterations] [warm-up iterations]
set -euo pipefail
cd "$(dirname "$0")/.."
tessera=${1:-build/release/tessera}
iters=${2:-300}
warmup=${3:-20}
lr=${LR:-1e-3}  # peak learning rate (cosine decay to a tenth)
cache=${TESSERA_DATA_CACHE:-data-cache}
out=${OUT_DIR:-out/ouroboros_brown}
brown=$cache/brown
scripts/prepare_brown.sh "$tessera" "$brown" 4096
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
# 6 layers: 3 per 1F1B stage, 2 per Ouroboros module. Tied embeddings (Ouroboros needs them); no dropout.
model=(--num-layers 6 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128
       --data-path "$brown/brown_sp4096_text_document" --split 98,2,0
       --tokenizer-type SentencePieceTokenizer --tokenizer-model "$brown/brown_sp4096.model"
       --micro-batch-size 4 --global-batch-size 8 --train-iters "$iters" --lr "$lr" --min-lr "$(awk -v x="$lr" 'BEGIN { print x / 10 }')"
       --lr-decay-style cosine --lr-warmup-fraction 0.05 --weight-decay 0.1 --clip-grad 1.0
       --hidden-dropout 0 --attention-dropout 0 --log-interval 10 --eval-interval "$iters" --eval-iters 8
       --pipeline-model-parallel-size 2)
echo "command: LR=$lr bench/ouroboros_brown.sh $tessera $iters $warmup"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(getconf _NPROCESSORS_ONLN) CPUs), load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "$out"
mkdir -p "$out"
median_ms() { grep -oE "elapsed time per iteration \(ms\): [0-9.]+" "$1" | grep -oE "[0-9.]+$" | tail -n +2 |
              sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
last() { grep -oE "$2: [0-9.E+-]+" "$1" | tail -1 | grep -oE "[0-9.E+-]+$"; }
echo
echo "| schedule | ms/iteration (median) | training loss at the end | validation loss | wall time (s) |"
echo "|---|---:|---:|---:|---:|"
for schedule in 1f1b ouroboros; do
  extra=()
  [ "$schedule" = ouroboros ] && extra=(--pipeline-schedule ouroboros --ouroboros-warmup-iters "$warmup")
  start=$(date +%s.%N)
  mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$tessera" train "${model[@]}" "${extra[@]}" \
    --log-dir "$out/$schedule" > "$out/$schedule.log" 2>&1
  seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
  echo "| $schedule | $(median_ms "$out/$schedule.log") | $(last "$out/$schedule.log" "lm loss") |" \
       "$(last "$out/$schedule.log" "lm loss value") | $seconds |"
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$out" <<'PY'
import json, os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

out = sys.argv[1]
fig, (by_iteration, by_time) = plt.subplots(1, 2, figsize=(11, 4))
for schedule, color in (("1f1b", "#1f77b4"), ("ouroboros", "#d62728")):
    iterations, losses, seconds, elapsed = [], [], [], 0.0
    for line in open(os.path.join(out, schedule, "metrics.jsonl"), encoding="utf-8"):
        record = json.loads(line)
        if "lm_loss" not in record or "elapsed_ms_per_iteration" not in record:
            continue
        previous = iterations[-1] if iterations else 0
        elapsed += record["elapsed_ms_per_iteration"] * (record["iteration"] - previous) / 1000
        iterations.append(record["iteration"])
        losses.append(record["lm_loss"])
        seconds.append(elapsed)
    label = "1F1B" if schedule == "1f1b" else "Ouroboros (K = 3 on 2 ranks)"
    by_iteration.plot(iterations, losses, color=color, label=label)
    by_time.plot(seconds, losses, color=color, label=label)
by_iteration.set_xlabel("iteration")
by_time.set_xlabel("training time (s)")
for ax in (by_iteration, by_time):
    ax.set_ylabel("training lm loss")
    ax.grid(alpha=0.3)
    ax.legend()
fig.suptitle("Ouroboros against 1F1B on Brown, 2 pipeline ranks")
fig.tight_layout()
path = os.path.join(out, "ouroboros_brown.png")
fig.savefig(path, dpi=110)
print(f"plot: {path}")
PY
