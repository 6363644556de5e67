#!/usr/bin/env bash
# When one rank of a training job dies, the others must not hang: the job ends with an error within
# 60 seconds.
set -uo pipefail
tessera=${1:?usage: kill_rank.sh path/to/tessera}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1

mpirun --oversubscribe --allow-run-as-root -np 2 "$tessera" train \
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --mock-data \
  --tokenizer-type NullTokenizer --vocab-size 100 --micro-batch-size 2 --global-batch-size 4 \
  --train-iters 100000 --lr 1e-3 --log-interval 1 --eval-iters 0 >"$log" 2>&1 &
launcher=$!

# Wait until training is under way, then kill one rank (not the launcher).
for _ in $(seq 1 120); do
  grep -q "iteration        2/" "$log" && break
  sleep 0.5
done
victim=$(pgrep -P $launcher -f "train" | tail -1)  # the ranks are mpirun's children
if [ -z "$victim" ]; then
  echo "could not find a rank to kill"; cat "$log"; kill $launcher; echo "0 passed, 1 failed"; exit 1
fi
kill -9 "$victim"
start=$(date +%s)
wait $launcher
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "killed pid $victim; the job exited with status $rc after ${elapsed}s"
if [ $rc -ne 0 ] && [ $elapsed -le 60 ]; then
  echo "1 passed, 0 failed"
else
  tail -20 "$log"; echo "0 passed, 1 failed"; exit 1
fi
