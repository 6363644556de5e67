#!/usr/bin/env bash
# A job killed while asynchronous saves are written (issue 58, items 1 and 3, the tests/kill_rank.sh
# pattern): SIGKILL to one rank at three moments, with a save of every iteration written slowly, never
# leaves the tracker naming an incomplete checkpoint, and the job resumes from the one it names; the next
# save removes what the kill left.
set -uo pipefail
tessera=${1:?usage: async_save_kill_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
source "$(dirname "$0")/lib/checkpoint_checks.sh"  # complete DIR
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
unset TESSERA_INJECT_FAULT TESSERA_CKPT_WRITE_DELAY_MS
mpirun="mpirun --oversubscribe --allow-run-as-root -np 2"
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
       --log-interval 1 --eval-iters 0 --tensor-model-parallel-size 2)

# The kills come 0.2, 0.6 and 1.0 s after the first save is finalised, in three jobs run side by side;
# each file takes 80 ms more to write (a slow disk), so the writer is nearly always in the middle of one.
# kill_after K SECONDS: runs job K and kills its rank 1 SECONDS after its first save; writes its status.
kill_after() {
  local dir=$work/kill$1 log=$work/kill$1.log launcher victim
  TESSERA_CKPT_WRITE_DELAY_MS=80 $mpirun "$tessera" train "${model[@]}" --train-iters 100000 --save-interval 1 \
    --save "$dir" --async-save >"$log" 2>&1 &
  launcher=$!
  for _ in $(seq 1 300); do grep -q "saved checkpoint at iteration" "$log" && break; sleep 0.1; done
  sleep "$2"
  victim=$(pgrep -P $launcher -f "tessera train" | tail -1)
  [ -n "$victim" ] && kill -9 "$victim"
  timeout 60 tail --pid=$launcher -f /dev/null
  wait $launcher
  echo "$? ${victim:-none}" >"$work/kill$1.status"
}
kill_after 0 0.2 &
kill_after 1 0.6 &
kill_after 2 1.0 &
wait
for k in 0 1 2; do
  dir=$work/kill$k
  read -r rc victim <"$work/kill$k.status"
  [ "$victim" != none ] && [ "$rc" -ne 0 ]
  check "kill $k: a rank was killed and the job ended (rc $rc): $(tail -2 "$work/kill$k.log")" $?
  it=$(complete "$dir" 2>&1)
  check "kill $k: the tracker names a complete checkpoint: $it (the directory: $(ls "$dir" | tr '\n' ' '))" $?
  out=$(timeout 60 $mpirun "$tessera" train "${model[@]}" --train-iters $((it + 1)) --load "$dir" 2>&1)
  rc=$?
  [ $rc -eq 0 ] && grep -q "loaded checkpoint from $dir at iteration $it " <<<"$out" &&
    grep -qE "iteration +$((it + 1))/" <<<"$out"
  check "kill $k: it resumes from iteration $it: $(tail -2 <<<"$out")" $?
done

# What a kill leaves behind, an unfinished save's directory and a tracker's temporary file (a kill between
# its write and its rename: the fault campaign, bench/fault_campaign.py, found them), goes at the next save.
dir=$work/kill0
it=$(complete "$dir" 2>&1)
mkdir -p "$dir/iter_0000099.tmp" && echo 7 >"$dir/latest_checkpointed_iteration.txt.tmp.12345"
out=$(timeout 60 $mpirun "$tessera" train "${model[@]}" --train-iters $((it + 1)) --load "$dir" --save "$dir" --async-save 2>&1)
rc=$?
[ $rc -eq 0 ] && [ ! -e "$dir/iter_0000099.tmp" ] && [ ! -e "$dir/latest_checkpointed_iteration.txt.tmp.12345" ] &&
  [ "$(complete "$dir" 2>&1)" = $((it + 1)) ]
check "the next save removes a kill's leftovers (rc $rc): $(ls "$dir" | tr '\n' ' ')" $?

finish async_save_kill_cli
