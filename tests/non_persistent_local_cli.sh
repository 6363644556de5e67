#!/usr/bin/env bash
# Megatron's non-persistent checkpoints (issue 58, item 2), local: with --non-persistent-ckpt-type local
# each rank saves all of its state into --non-persistent-local-ckpt-dir/rank_NNNNN (each node's own disk),
# only the newest kept; --load resumes from the newest of persistent and non-persistent with the
# uninterrupted run's next loss; a newer local checkpoint that not every rank completed gives way to the
# newest all have, a rank that lost its directory (or another layout) to the persistent checkpoint.
set -uo pipefail
tessera=${1:?usage: non_persistent_local_cli.sh path/to/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/lib/checks.sh"
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
unset TESSERA_INJECT_FAULT TESSERA_CKPT_WRITE_DELAY_MS
mpi=(timeout 60 mpirun --oversubscribe --allow-run-as-root -np 2)
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --mock-data
       --tokenizer-type NullTokenizer --vocab-size 60 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
       --log-interval 1 --eval-iters 0)
# loss LOG N: the lm loss of iteration N.
loss() { sed -nE "s/.*iteration +$2\/.*lm loss: ([^ ]+) .*/\1/p" "$1"; }
# local, tp 2: persistent at 4, local at 2 and 6 (a persistent save takes 4's place); fault in 7.
local=(--non-persistent-ckpt-type local --non-persistent-local-ckpt-dir "$work/nodes")
TESSERA_INJECT_FAULT=1:7:backward "${mpi[@]}" "$tessera" train "${model[@]}" --tensor-model-parallel-size 2 \
  --train-iters 20 --save "$work/l" --save-interval 4 --non-persistent-save-interval 2 "${local[@]}" >"$work/l.log" 2>&1
grep -q "saved non-persistent checkpoint (local) at iteration 6 to $work/nodes" "$work/l.log" && grep -q "injected fault" "$work/l.log"
check "local: saved at 2 and 6 until the fault: $(grep -E "saved|error" "$work/l.log" | tail -3)" $?
[ "$(ls "$work/nodes" | tr '\n' ' ')" = "rank_00000 rank_00001 " ] &&
  [ "$(ls "$work/nodes/rank_00000" | tr '\n' ' ')" = "iter_0000006 latest_checkpointed_iteration.txt " ] &&
  [ "$(ls "$work/nodes/rank_00001" | tr '\n' ' ')" = "iter_0000006 latest_checkpointed_iteration.txt " ] &&
  [ "$(ls "$work/l" | tr '\n' ' ')" = "iter_0000004 latest_checkpointed_iteration.txt " ]
check "local: each rank keeps only its newest (6) in its own directory: $(ls -R "$work/nodes" | tr '\n' ' ')" $?
grep -q '"optimizer.exp_avg.decoder.final_layernorm.weight"' "$work/nodes/rank_00001/iter_0000006/index.json" &&
  ls "$work/nodes/rank_00001/iter_0000006" | grep -q "^optim.tp01.pp00.dp000.safetensors$"
check "local: rank 1 holds all of its state, the replicated tensors and their moments too: $(ls "$work/nodes/rank_00001/iter_0000006")" $?
cp -r "$work/nodes" "$work/nodes-at-6"
"${mpi[@]}" "$tessera" train "${model[@]}" --tensor-model-parallel-size 2 --train-iters 7 --load "$work/l" "${local[@]}" \
  >"$work/l2.log" 2>&1
check "local: resumes: $(tail -2 "$work/l2.log")" $?
grep -q "loaded checkpoint from $work/nodes/rank_00000 (non-persistent, local: each rank its own directory) at iteration 6" "$work/l2.log"
check "local: from the newest, each rank's own checkpoint of 6: $(grep loaded "$work/l2.log")" $?
"${mpi[@]}" "$tessera" train "${model[@]}" --tensor-model-parallel-size 2 --train-iters 7 >"$work/tp2.log" 2>&1
[ -n "$(loss "$work/l2.log" 7)" ] && [ "$(loss "$work/l2.log" 7)" = "$(loss "$work/tp2.log" 7)" ]
check "local: iteration 7's loss is the uninterrupted run's: $(loss "$work/l2.log" 7) / $(loss "$work/tp2.log" 7)" $?

# A newer local checkpoint that only rank 0 completed (a job killed between the ranks' renames): the
# ranks agree on 6, which both have, and rank 0's 8 is rolled back.
cp -r "$work/nodes-at-6/rank_00000/iter_0000006" "$work/nodes/rank_00000/iter_0000008"
sed -i 's/"iteration": 6,/"iteration": 8,/' "$work/nodes/rank_00000/iter_0000008/index.json"
echo 8 >"$work/nodes/rank_00000/latest_checkpointed_iteration.txt"
"${mpi[@]}" "$tessera" train "${model[@]}" --tensor-model-parallel-size 2 --train-iters 7 --load "$work/l" "${local[@]}" \
  >"$work/l3.log" 2>&1
grep -q "loaded checkpoint from $work/nodes/rank_00000 (non-persistent, local: each rank its own directory) at iteration 6" "$work/l3.log" &&
  [ "$(ls "$work/nodes/rank_00000" | tr '\n' ' ')" = "iter_0000006 latest_checkpointed_iteration.txt " ]
check "local: rank 0's unagreed 8 rolled back, 6 loaded: $(grep -E "loaded|rror" "$work/l3.log") $(ls "$work/nodes/rank_00000")" $?
# A node whose disk lost its checkpoints: the persistent checkpoint of 4 is taken, with a warning.
rm -r "$work/nodes/rank_00001"
"${mpi[@]}" "$tessera" train "${model[@]}" --tensor-model-parallel-size 2 --train-iters 5 --load "$work/l" "${local[@]}" \
  >"$work/l4.log" 2>&1
grep -q "loaded checkpoint from $work/l at iteration 4" "$work/l4.log" &&
  grep -q "WARNING: not every rank has a local non-persistent checkpoint in $work/nodes" "$work/l4.log"
check "local: a rank without its directory: the persistent checkpoint is taken: $(grep -E "loaded|WARN|rror" "$work/l4.log")" $?
# Another layout (one process) does not use them.
out=$("$tessera" train "${model[@]}" --train-iters 5 --load "$work/l" --non-persistent-ckpt-type local \
  --non-persistent-local-ckpt-dir "$work/nodes-at-6" 2>&1)
grep -q "saved at another layout (world_size); not used" <<<"$out" && grep -q "loaded checkpoint from $work/l at iteration 4" <<<"$out"
check "local: checkpoints of another layout are not used: $(grep -E "loaded|WARN|rror" <<<"$out")" $?

finish non_persistent_local_cli
