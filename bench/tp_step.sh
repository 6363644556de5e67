#!/usr/bin/env bash
# Time of a training step at tensor-parallel size 2 (2 MPI ranks x 1 thread) against tp=1 (1 process x
# 2 threads) on the same model, the same global batch and the same number of cores: what tensor (and
# sequence) parallelism costs or saves when the cores are the same, i.e. its communication and the
# smaller GEMMs against OpenMP threading inside one process.
#
# Usage: bench/tp_step.sh
# Environment: ITERS=8 WARMUP=2 LAYERS=4 HIDDEN=512 HEADS=8 SEQ=512 MBS=1 GBS=4
#              SKIP_BUILD=1 (use build/release as it is)  OUT_DIR=out/bench-tp (raw logs)
# The first WARMUP iterations (oneDNN primitive creation, first touch of the optimizer state) are left
# out; the table reports the median of the rest of "elapsed time per iteration (ms)".
set -euo pipefail
cd "$(dirname "$0")/.."

ITERS=${ITERS:-8}
WARMUP=${WARMUP:-2}
LAYERS=${LAYERS:-4}
HIDDEN=${HIDDEN:-512}
HEADS=${HEADS:-8}
SEQ=${SEQ:-512}
MBS=${MBS:-1}
GBS=${GBS:-4}
OUT_DIR=${OUT_DIR:-out/bench-tp}
if [ "$WARMUP" -ge "$ITERS" ]; then
  echo "ITERS ($ITERS) must exceed WARMUP ($WARMUP): nothing would be timed" >&2
  exit 2
fi
mkdir -p "$OUT_DIR"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  [ -f build/release/build.ninja ] || cmake --preset release >/dev/null
  ninja -C build/release tessera >"$OUT_DIR/build.log" || { tail -30 "$OUT_DIR/build.log"; exit 1; }
fi
# A private copy: others rebuild build/release on this machine, and a relink mid-run would swap the binary.
bin=$OUT_DIR/tessera
cp build/release/tessera "$bin"

# GPT-2's vocabulary (50256 + 1 EOD). The padded vocabulary is a multiple of divisible-by x tp, so 128 at
# tp=1 and 64 at tp=2 both give 50304: the two runs have exactly the same model.
model=(--num-layers "$LAYERS" --hidden-size "$HIDDEN" --num-attention-heads "$HEADS" --seq-length "$SEQ"
       --mock-data --tokenizer-type NullTokenizer --vocab-size 50256
       --hidden-dropout 0 --attention-dropout 0
       --micro-batch-size "$MBS" --global-batch-size "$GBS" --train-iters "$ITERS"
       --lr 1e-4 --log-interval 1 --eval-iters 0)

# Median of the per-iteration times in a log, after the warm-up iterations.
median_ms() {
  grep -o 'elapsed time per iteration (ms): [0-9.]*' "$1" | awk '{ print $NF }' | tail -n +"$((WARMUP + 1))" |
    sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Runs one configuration (name, then the command), prints its median and the load around it: the
# machine is shared, and a load average well above 2 during a run means the number is disturbed.
declare -A ms
run() {
  local name=$1; shift
  local log=$OUT_DIR/$name.log
  local before after
  before=$(cut -d' ' -f1 /proc/loadavg)
  "$@" >"$log" 2>&1 || { echo "$name failed; tail of $log:" >&2; tail -20 "$log" >&2; exit 1; }
  after=$(cut -d' ' -f1 /proc/loadavg)
  ms[$name]=$(median_ms "$log")
  printf '  %-8s %9.1f ms/iter   (1-min load before %s, after %s)\n' "$name" "${ms[$name]}" "$before" "$after"
}

echo "tp_step: $LAYERS layers, hidden $HIDDEN, $HEADS heads, seq $SEQ, micro batch $MBS, global batch $GBS;" \
  "median of iterations $((WARMUP + 1))..$ITERS"
run tp1 env OMP_NUM_THREADS=2 "$bin" train "${model[@]}" --make-vocab-size-divisible-by 128
# 2 ranks on 2 cores is not oversubscribed, so ranks busy-poll (no yield_when_idle). --bind-to none lets
# the OS place the ranks as it places tp=1's two OpenMP threads (neither run is pinned).
mpi=(mpirun --allow-run-as-root --bind-to none -np 2 -x OMP_NUM_THREADS=1)
run tp2 env OMP_NUM_THREADS=1 "${mpi[@]}" "$bin" train "${model[@]}" --make-vocab-size-divisible-by 64 \
  --tensor-model-parallel-size 2
run tp2_sp env OMP_NUM_THREADS=1 "${mpi[@]}" "$bin" train "${model[@]}" --make-vocab-size-divisible-by 64 \
  --tensor-model-parallel-size 2 --sequence-parallel

echo
echo "| layout | processes x threads | ms / iteration | vs tp=1 |"
echo "|---|---|---:|---:|"
row() { awk -v n="$1" -v pt="$2" -v t="${ms[$3]}" -v b="${ms[tp1]}" 'BEGIN { printf "| %s | %s | %.1f | %.2fx |\n", n, pt, t, t / b }'; }
row "tp=1" "1 x 2" tp1
row "tp=2" "2 x 1" tp2
row "tp=2, sequence parallel" "2 x 1" tp2_sp
